"""A package outside cactus_bench that adds a decode backend, an acceptance rule and a metric through the
entry points its metadata (plugpkg-0.1.dist-info/entry_points.txt) declares, as an installed one would."""

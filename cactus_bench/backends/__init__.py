"""Decode backends. Each registers a `Backend` in `core.decode.api.BACKENDS` through the
`cactus_bench.backends` entry points (pyproject.toml), the group outside packages use too, so the core never
imports a backend. A backend module imports only torch at module level: config validation reads the
registry before any model code loads."""

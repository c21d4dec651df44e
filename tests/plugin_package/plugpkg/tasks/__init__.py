"""Task YAMLs this package adds to cactus_bench (entry point group `cactus_bench.tasks`)."""

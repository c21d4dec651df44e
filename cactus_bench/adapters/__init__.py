"""Adapters between the core and the outside: benchmarks (lm-eval tasks, loaders, Spec-Bench) and the
embedded offline pair with its `arith` task."""

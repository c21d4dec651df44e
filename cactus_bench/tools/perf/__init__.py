"""Speed measurement: what the benchmark scripts (`scripts/bench_*`) and the device check share: synthetic
pairs of real shapes (`shapes`), timing and result files (`results`), ops per round (`launch`). Core: torch
and transformers only (the GPU box has nothing else)."""

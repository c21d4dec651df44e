"""What the benchmark scripts (`scripts/`) and the device check share: synthetic pairs of real shapes,
timing, and writing results. Core: torch and transformers only (the GPU box has nothing else)."""

"""Tools that read or drive runs: reports and figures, table sweeps, cost plans, re-scoring, the stored-run
listing, the W&B workspace and the performance benchmarks."""

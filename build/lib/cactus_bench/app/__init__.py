"""The Hydra app: configs, the results store, runs, tracking. Adapters over the core."""

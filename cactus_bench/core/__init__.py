"""The core: acceptance rules, methods, metrics and the decode engine. It needs torch and transformers
alone, so it runs on a GPU box that has nothing else."""

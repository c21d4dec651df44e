"""`python -m cactus_bench [overrides]` — one run (or a Hydra multirun with -m). See conf/config.yaml."""

import logging
import sys

import hydra
from omegaconf import DictConfig

from .app.config import ConfigError
from .app.run import run
from .benchmarks.data import DataError
from .metrics import METRICS


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    logging.getLogger("cactus_bench").setLevel(logging.INFO)
    try:
        summary = run(cfg)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    keys = ["samples"] + [
        k for m in METRICS.values() if m.cli for k in (m.name, f"{m.name}_stderr") if k in summary or k == m.name
    ]
    print(
        "  ".join(
            f"{k}={summary[k]:.4g}" if isinstance(summary.get(k), float) else f"{k}={summary.get(k)}" for k in keys
        )
    )


if __name__ == "__main__":
    main()

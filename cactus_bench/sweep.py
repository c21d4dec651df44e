"""Run the sweep behind a table spec, then render the table next to the paper's numbers.

    python -m cactus_bench.sweep sweeps/table2.yaml [pair=tiny] [limit=2] [data=arith] [other Hydra overrides]

`pair`, `limit`, `data` (comma-separated), `m`, `max_gen_toks` and `seed` override the spec; any other
key=value is passed to every run as a Hydra override. Runs happen in this process, one pair load for all;
each run resumes from the store, so an interrupted sweep continues where it stopped.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from .app.config import CONF_DIR
from .app.run import run
from .report import load_runs, load_spec, render_table, run_overrides

SPEC_KEYS = ("pair", "limit", "data", "m", "max_gen_toks", "seed")


def parse(argv: list[str]) -> tuple[str, dict, list[str]]:
    if not argv or "=" in argv[0]:
        raise SystemExit(__doc__)
    spec_overrides, hydra_overrides = {}, []
    for arg in argv[1:]:
        key, _, value = arg.partition("=")
        if key in SPEC_KEYS and value != "":
            spec_overrides[key] = value.split(",") if key == "data" else value
        elif value != "":
            hydra_overrides.append(arg)
    return argv[0], spec_overrides, hydra_overrides


def main(argv: list[str] | None = None) -> str:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spec_path, spec_overrides, extra = parse(sys.argv[1:] if argv is None else argv)
    spec = load_spec(spec_path, spec_overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for data in spec["data"]:
            for row in spec["rows"]:
                cfg = compose("config", overrides=run_overrides(spec, row, data) + extra)
                print(f"== {spec['name']}: {row['label']} on {data}", flush=True)
                run(cfg)
            results_dir = cfg.results_dir
    md, path = render_table(spec, load_runs(results_dir), Path(results_dir).parent / "tables", extra)
    print(md)
    print(f"written: {path.with_suffix('')}.{{csv,md,tex}}")
    return md


if __name__ == "__main__":
    main()

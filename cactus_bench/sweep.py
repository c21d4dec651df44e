"""Run the sweep behind a table spec, then render the table next to the paper's numbers.

    python -m cactus_bench.sweep sweeps/table2.yaml [pair=tiny] [limit=2] [data=arith] [other Hydra overrides]
    python -m cactus_bench.sweep sweeps/table1.yaml shards=8 hydra/launcher=slurm       # a cluster

`pair`, `limit`, `data` (comma-separated), `m`, `max_gen_toks` and `seed` override the spec; any other
key=value is passed to every run as a Hydra override. Without `shards` or a launcher, runs happen in this
process, one pair load for all. With them, every cell × shard is one job of a single Hydra multirun on the
chosen launcher (`hydra/launcher=slurm`: one GPU per job; `hydra/launcher=local_gpus`: one machine's GPUs):
each cell is written as a config (`+cell=...`) beside the multirun's files, and the last shard of a run to
finish writes its summary. Either way every run resumes from the store, and the table follows.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from omegaconf import DictConfig

from .methods import Method
from .report import compose, figures, load_runs, load_spec, render_table
from .report.specs import cell_config, pair_spec, run_overrides, spec_pairs

SPEC_KEYS = ("pair", "limit", "data", "m", "max_gen_toks", "seed", "batch_size", "timing_sample")


def parse(argv: list[str]) -> tuple[str, dict, list[str]]:
    if not argv or "=" in argv[0]:
        raise SystemExit(__doc__)
    spec_overrides, hydra_overrides = {}, []
    for arg in argv[1:]:
        key, _, value = arg.partition("=")
        if key in SPEC_KEYS + ("shards",) and value != "":
            spec_overrides[key] = value.split(",") if key == "data" else value
        elif value != "":
            hydra_overrides.append(arg)
    return argv[0], spec_overrides, hydra_overrides


def launch(spec: dict, extra: list[str], shards: int, multirun: Path) -> None:
    """Every cell × shard as one Hydra multirun (the launcher in `extra`, else Hydra's basic one)."""
    folder = multirun / f"{spec['name']}-{time.strftime('%Y%m%d-%H%M%S')}"
    cells = []
    for _, pair in spec_pairs(spec):
        for data in spec["data"]:
            for row in spec["rows"]:
                name = f"{spec['name']}_{len(cells)}"
                path = folder / "cell" / f"{name}.yaml"
                path.parent.mkdir(parents=True, exist_ok=True)
                node = cell_config(pair_spec(spec, pair), row, data)
                path.write_text("# @package _global_\n" + yaml.safe_dump(node, sort_keys=False))
                cells.append(name)
    shard = ",".join(f"{i}/{shards}" for i in range(shards))
    cmd = [
        sys.executable,
        "-m",
        "cactus_bench",
        "-m",
        f"hydra.searchpath=[file://{folder}]",
        f"+cell={','.join(cells)}",
        f"shard={shard}",
        f"hydra.sweep.dir={folder / 'jobs'}",
        *extra,
    ]
    print("launching:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=os.environ)


def sources(data: str | None) -> str:
    """Where this sweep's data and weights come from, in one line."""
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    weights = (
        "local files and the hub cache only (HF_HUB_OFFLINE=1)" if offline else "the Hugging Face hub (and its cache)"
    )
    return f"data: {data or 'the Hugging Face hub'}; weights: {weights} (embedded pairs: built locally)"


def cells(spec: dict, extra: list[str]) -> list[tuple[str, DictConfig, Method]]:
    """Every cell of the sweep composed and validated, before any runs: (name, config, method)."""
    from .app.config import ConfigError, validate
    from .app.errors import ConfigCompositionError, explain_composition

    out = []
    for _, pair in spec_pairs(spec):
        for data in spec["data"]:
            for row in spec["rows"]:
                name = f"{row['label']} on {data} ({pair})"
                overrides = run_overrides(pair_spec(spec, pair), row, data) + [
                    o for o in extra if not o.startswith("hydra")
                ]
                try:
                    cfg = compose(tuple(overrides))
                    out.append((name, cfg, validate(cfg)))
                except ConfigError as e:
                    raise ConfigError(f"{spec['name']}, cell {name}: {e}") from None
                except Exception as e:  # noqa: BLE001  (Hydra's composition errors, rewritten)
                    explained = explain_composition(e, overrides)
                    if explained is None:
                        raise
                    raise ConfigCompositionError(f"{spec['name']}, cell {name}: {explained}") from None
    return out


def main(argv: list[str] | None = None) -> str:
    from .app.errors import fail

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spec_path, spec_overrides, extra = parse(sys.argv[1:] if argv is None else argv)
    shards = int(spec_overrides.pop("shards", 0) or 0)
    spec = load_spec(spec_path, spec_overrides)
    try:
        todo = cells(spec, extra)  # every cell checked before the first one runs
    except ValueError as e:  # ConfigError, ConfigCompositionError: one paragraph, exit 2
        fail(e)
    paths = todo[0][1].paths
    print(sources(paths.data), flush=True)
    if shards or any(o.startswith("hydra/launcher=") for o in extra):
        launch(spec, extra, max(shards, 1), Path(paths.multirun))
    else:
        from .app.run import run

        for name, cfg, method in todo:
            print(f"== {spec['name']}: {name}", flush=True)
            try:
                run(cfg, method)
            except KeyboardInterrupt:
                print(f"interrupted during {name}: the same command resumes the sweep", file=sys.stderr)
                sys.exit(130)
            except Exception as e:  # noqa: BLE001  (one paragraph naming what failed; --debug: the traceback)
                fail(e)
    identity_overrides = [o for o in extra if not o.startswith(("hydra", "progress", "tracking"))]
    runs = load_runs(paths.runs)
    if spec.get("figure"):
        made = figures(runs, paths.figures, [spec], identity_overrides)
        print("\n".join(str(p) for p in made.values()))
        return ""
    md, path = render_table(spec, runs, paths.tables, identity_overrides)
    print(md)
    if path is not None:
        print(f"written: {path.with_suffix('')}.{{csv,md,tex}}")
    return md


if __name__ == "__main__":
    main()

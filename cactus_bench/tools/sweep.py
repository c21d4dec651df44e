"""Run the sweep behind a table spec, then render the table next to the paper's numbers.

Spec settings override the spec; any other key=value is passed to every run as a Hydra override. Without
`shards` or a launcher, runs happen in this process, one pair load for all, and the runs that time a sample
time it together (`app.together`: a cell's methods back to back beside one verifier-alone decode of each
item; `timing=apart`: each run beside its own). With them, every cell × shard
is one job of a single Hydra multirun on the chosen launcher (`hydra/launcher=slurm`: one job array, one
GPU per task; `hydra/launcher=local_gpus`: one machine's GPUs): each run is written as a config
(`+run=...`) beside the multirun's files, and the last shard of a run to finish writes its summary. Either
way every run resumes from the store, and the table follows.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from omegaconf import DictConfig

from cactus_bench.app.compose import compose
from cactus_bench.app.runs import load_runs
from cactus_bench.core.cli import Command, Key
from cactus_bench.tools.report import figures, load_spec, render_table
from cactus_bench.tools.report.specs import (
    SPEC_KEYS,
    cell_config,
    pair_spec,
    run_overrides,
    spec_overrides,
    spec_pairs,
    spec_seeds,
)

if TYPE_CHECKING:
    from cactus_bench.app.config import RunSpec

COMMAND = Command(
    prog="python -m cactus_bench.tools.sweep",
    about=__doc__,
    positional=(Key("spec", "the table or figure spec (sweeps/*.yaml)", required=True),),
    keys=(
        *SPEC_KEYS,
        Key("shards", "jobs each run is split into (a multirun)", 0, int),
        Key("slots_per_gpu", "runs sharing one GPU", 1, int),
        Key(
            "timing",
            "how runs in this process time their samples: together (a cell's methods back to back beside one "
            "verifier-alone decode of each item) or apart (each run beside its own)",
            "together",
            choices=("together", "apart"),
        ),
    ),
    overrides="Hydra overrides for every run (e.g. sampling=greedy), and the launcher (hydra/launcher=slurm)",
    examples=(
        "python -m cactus_bench.tools.sweep sweeps/table2.yaml pair=tiny limit=2 data=arith",
        "python -m cactus_bench.tools.sweep sweeps/table1.yaml shards=8 hydra/launcher=slurm",
    ),
)


def parse(argv: list[str]) -> tuple[str, dict, list[str], int, int, str]:
    """The spec's path, its overrides, the runs' Hydra overrides, shards, slots per GPU and the timing."""
    args = COMMAND.parse(argv)
    return args.spec, spec_overrides(args), args.overrides, args.shards, args.slots_per_gpu, args.timing


def launch(spec: dict, todo: list, extra: list[str], shards: int, multirun: Path, slots: int = 1) -> None:
    """Every cell x shard not finished yet as one Hydra multirun (the launcher in `extra`, else Hydra's basic
    one); with `slots` > 1, that many runs share a GPU: packed k to a SLURM job (k tasks), or k workers per GPU
    under local_gpus."""
    folder = multirun / f"{spec['name']}-{time.strftime('%Y%m%d-%H%M%S')}"
    runs, skipped = [], 0
    for c, ((cell_spec, row, data), (_, run_spec)) in enumerate(zip(spec_cells(spec), todo)):
        name = f"{spec['name']}_{c}"
        for i in range(shards):
            shard = f"{i}/{shards}"
            if shard_finished(run_spec, shard):
                skipped += 1
                continue
            runs.append((name, shard, cell_config(cell_spec, row, data), run_overrides(cell_spec, row, data)))
    if skipped:
        print(f"{skipped} shard(s) already finished: not submitted", flush=True)
    if not runs:
        return
    launcher = next((o.split("=", 1)[1] for o in extra if o.startswith("hydra/launcher=")), None)
    cmd = [sys.executable, "-m", "cactus_bench", "-m", f"hydra.searchpath=[file://{folder}]"]
    cmd.append(f"hydra.sweep.dir={folder / 'jobs'}")
    gpus = gpus_per_job([run_spec.cfg for _, run_spec in todo])
    if launcher == "slurm" and gpus > 1 and not any(o.startswith("hydra.launcher.gpus_per_node=") for o in extra):
        cmd.append(f"hydra.launcher.gpus_per_node={gpus}")  # a verifier sharded over several GPUs
    if slots > 1 and launcher == "slurm":  # k runs to a job: its k tasks share the job's GPU
        run_args = [o for o in extra if not o.startswith("hydra")]
        packs = [runs[j : j + slots] for j in range(0, len(runs), slots)]
        for j, pack in enumerate(packs):
            entries = [[*overrides, f"shard={shard}", *run_args] for _, shard, _, overrides in pack]
            write_config(folder / "pack" / f"pack_{j}.yaml", {"pack": entries})
        cmd += [f"+pack={','.join(f'pack_{j}' for j in range(len(packs)))}", f"hydra.launcher.tasks_per_node={slots}"]
    else:  # one job per run: each run's config (the cell and its shard) is an option of the `run` group
        names = []
        for name, shard, node, _ in runs:
            names.append(f"{name}-{shard.replace('/', 'of')}")
            write_config(folder / "run" / f"{names[-1]}.yaml", {**node, "shard": shard})
        cmd.append(f"+run={','.join(names)}")
    if slots > 1 and launcher == "local_gpus":  # k workers per GPU (each claims a slot: __main__)
        cmd.append(f"hydra.launcher.n_jobs={int(os.environ.get('CACTUS_BENCH_GPUS', '1')) * slots}")
    _multirun([*cmd, *extra], slots)


def gpus_per_job(cfgs: list[DictConfig]) -> int:
    """The GPUs a job asks for: the most any run shards its verifier over (pair.tensor_parallel_size)."""
    return max((int(c.pair.get("tensor_parallel_size", 1)) for c in cfgs), default=1)


def write_config(path: Path, node: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# @package _global_\n" + yaml.safe_dump(node, sort_keys=False))


def _multirun(cmd: list[str], slots: int) -> None:
    env = dict(os.environ)
    env["CACTUS_BENCH_SLOTS_PER_GPU"] = str(slots)  # runs sharing a GPU each budget their share of it
    print("launching:", " ".join(cmd), flush=True)
    if subprocess.run(cmd, env=env).returncode != 0:
        raise SweepFailed(
            "some runs of the sweep did not finish (named above). Their finished items are kept: run the same "
            "sweep command again to submit only what is left."
        )


class SweepFailed(RuntimeError):
    """A launched multirun ended with runs unfinished: the launcher named them."""


def shard_finished(run_spec: RunSpec, shard: str) -> bool:
    """Whether this shard of the run decoded all its items at this limit (its manifest says so)."""
    from cactus_bench.app.config import parse_shard
    from cactus_bench.app.store import RunStore

    manifest = RunStore(run_folder(run_spec), parse_shard(shard)).manifest()
    return manifest.get("status") == "complete" and manifest.get("limit") == run_spec.cfg.limit


def run_folder(run_spec: RunSpec) -> Path:
    return run_spec.identity.folder(run_spec.cfg.paths.runs)


def unfinished(todo: list[tuple[str, RunSpec]], shards: int) -> list[str]:
    """Each cell's shards that have not decoded all their items, with the run's folder."""
    out = []
    for name, run_spec in todo:
        left = [f"{i}/{shards}" for i in range(shards) if not shard_finished(run_spec, f"{i}/{shards}")]
        if left:
            where = run_folder(run_spec)
            out.append(f"{name}: shard {', '.join(left)} ({where})" if shards > 1 else f"{name} ({where})")
    return out


def spec_cells(spec: dict) -> list[tuple[dict, dict, str]]:
    """(the pair's spec at one seed, row, dataset) of every cell, in the order `cells` composes them: a spec
    with `seeds: [...]` runs every cell once per seed (each seed its own run)."""
    return [
        ({**pair_spec(spec, pair), "seed": seed}, row, data)
        for _, pair in spec_pairs(spec)
        for seed in spec_seeds(spec)
        for data in spec["data"]
        for row in spec["rows"]
    ]


def sources(data: str | None) -> str:
    """Where this sweep's data and weights come from: a line each (a long data path leaves the other short)."""
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    weights = "local files and the hub cache only (HF_HUB_OFFLINE=1)" if offline else "the Hugging Face hub, cached"
    return f"data: {data or 'the Hugging Face hub'}\nweights: {weights}; embedded pairs are built locally"


def cells(spec: dict, extra: list[str]) -> list[tuple[str, RunSpec]]:
    """Every cell of the sweep composed and validated, before any runs: (name, its run)."""
    from cactus_bench.app.config import ConfigError, validate
    from cactus_bench.app.errors import ConfigCompositionError, explain_composition

    out = []
    for cell_spec, row, data in spec_cells(spec):
        name = f"{row['label']} on {data} ({cell_spec['pair']})"
        overrides = run_overrides(cell_spec, row, data) + [o for o in extra if not o.startswith("hydra")]
        try:
            cfg = compose(tuple(overrides))
            out.append((name, validate(cfg)))
        except ConfigError as e:
            raise ConfigError(f"{spec['name']}, cell {name}: {e}") from None
        except Exception as e:  # noqa: BLE001  (Hydra's composition errors, rewritten)
            explained = explain_composition(e, overrides)
            if explained is None:
                raise
            raise ConfigCompositionError(f"{spec['name']}, cell {name}: {explained}") from None
    return out


def main(argv: list[str] | None = None) -> str:
    from cactus_bench.app.errors import fail
    from cactus_bench.app.offline import go_offline_without_network

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spec_path, overrides, extra, shards, slots, timing = parse(sys.argv[1:] if argv is None else argv)
    go_offline_without_network()  # before the hub's libraries read the switch
    try:
        if "hydra/launcher=slurm" in extra:
            from cactus_bench.app.cluster import require_slurm

            require_slurm()
        spec = load_spec(spec_path, overrides)
        todo = cells(spec, extra)  # every cell checked before the first one runs
    except (ValueError, RuntimeError) as e:  # SpecError, ConfigError, SlurmUnavailable, ...: a paragraph, exit 2
        fail(e)
    paths = todo[0][1].cfg.paths
    print(sources(paths.data), flush=True)
    if shards or any(o.startswith("hydra/launcher=") for o in extra):
        try:
            launch(spec, todo, extra, max(shards, 1), Path(paths.multirun), slots)
        except SweepFailed as e:
            left = unfinished(todo, max(shards, 1))
            fail(SweepFailed(f"{e} Not finished: {'; '.join(left)}." if left else str(e)))
    else:
        from cactus_bench.app.run import run
        from cactus_bench.app.together import time_together, times_together

        together = timing == "together"
        for name, run_spec in todo:
            print(f"== {spec['name']}: {name}", flush=True)
            try:
                run(run_spec, time_sample=not (together and times_together(run_spec)))
            except KeyboardInterrupt:
                print(f"interrupted during {name}: the same command resumes the sweep", file=sys.stderr)
                sys.exit(130)
            except Exception as e:  # noqa: BLE001  (one paragraph naming what failed; --debug: the traceback)
                fail(e)
        if together:
            try:
                time_together([run_spec for _, run_spec in todo])
            except KeyboardInterrupt:
                print("interrupted while timing: the same command resumes the sweep", file=sys.stderr)
                sys.exit(130)
            except Exception as e:  # noqa: BLE001
                fail(e)
    identity_overrides = [o for o in extra if not o.startswith(("hydra", "progress", "tracking"))]
    try:
        runs = load_runs(paths.runs)
    except ValueError as e:  # StoreError: a damaged samples line, named with what to do
        fail(e)
    if spec.get("figure"):
        made = figures(runs, paths.figures, [spec], identity_overrides)
        print("\n".join(str(p) for p in made.values()))
        if not spec.get("matched"):  # a figure spec's output is its figures; a matched reading is a table too
            return ""
    md, path = render_table(spec, runs, paths.tables, identity_overrides, spec.get("shown"))
    print(md)
    if path is not None:
        print(f"written: {path.with_suffix('')}.{{csv,md,tex}}" + (" (every column)" if spec.get("shown") else ""))
    return md


if __name__ == "__main__":
    main()

"""W&B as a dashboard (app/tracking.py, dashboard.py): one W&B run per run, resumed, logging what the
dashboards read."""

import time
from pathlib import Path

from cactus_bench.app import run as run_mod
from cactus_bench.app.store import run_dir

from ..helpers.configs import cfg_of

ROOT = Path(__file__).resolve().parents[2]


def test_wandb_resumes_one_run_and_logs_what_dashboards_need(small_pair_dir, tmp_path, monkeypatch):
    """Read back from the offline run files: one W&B id across a resume, method/delta/m as config keys,
    per-sample series, the headline score and Rej/speedup against the store's reference runs."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    base = ("pair=tiny", "data=arith", "m=2", "max_gen_toks=8", "progress=false", "tracking=wandb")
    for method in ("method=ar", "method=sps"):  # the reference runs, untracked
        run_mod.run(cfg_of(*base[:-1], method, "limit=2", results=tmp_path, pair_dir=small_pair_dir))
    args = (*base, "method=cactus", "delta=0.75")
    run_mod.run(cfg_of(*args, "limit=1", results=tmp_path, pair_dir=small_pair_dir))
    cfg = cfg_of(*args, "limit=2", results=tmp_path, pair_dir=small_pair_dir)
    run_mod.run(cfg)  # resumes
    offline = sorted(run_dir(cfg).glob("wandb/offline-run-*"))
    # offline-run-<time>-<id>[-n]: W&B adds -n when a resume starts within the same second
    assert len(offline) == 2 and len({p.name.split("-")[3] for p in offline}) == 1  # one W&B id
    debug_log = (offline[-1] / "logs" / "debug.log").read_text()  # W&B's own record of the run's config
    assert "'method': 'cactus', 'delta': 0.75, 'm': 2, 'pair': 'small', 'data': 'arith'" in debug_log
    keys = (
        b"sample/accepted_length",
        b"sample/score",
        b"sample/stopped_on_length",
        b"accepted_length_histogram",
        b"speedup",
        b"rej",
    )
    records = written(offline[-1], keys)
    for key in keys:
        assert key in records, key


def written(run_folder: Path, keys: tuple[bytes, ...], seconds: float = 60.0) -> bytes:
    """The run's transaction log once it holds every key, or as it stands after `seconds`: W&B's service
    process may still be writing it when `finish` has returned (a loaded CI machine read it header-only)."""
    deadline = time.monotonic() + seconds
    while True:
        records = next(run_folder.glob("*.wandb")).read_bytes()
        if all(key in records for key in keys) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def test_the_dashboard_description_reads_only_what_runs_log():
    """Every panel key of dashboards/wandb.yaml is a config key, a tracked summary metric or a per-sample
    series the tracker logs: a renamed metric breaks this test, not the dashboard."""
    from cactus_bench.app.tracking import SAMPLE_KEYS, summary_keys, wandb_config
    from cactus_bench.core.metrics import METRICS
    from cactus_bench.tools.dashboard import keys, load

    config_keys = set(wandb_config(cfg_of("pair=tiny")))
    summary = set(summary_keys()) | {m.name for m in METRICS.values() if m.relative is not None}
    history = {f"sample/{k}" for k in (*SAMPLE_KEYS, "score", "stopped_on_length", "new_tokens", "wall_time")}
    for key in keys(load()):
        kind, _, name = key.partition(":")
        assert name in {"config": config_keys, "summary": summary, "history": history}[kind], key

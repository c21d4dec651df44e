"""A CLI that fails in one readable paragraph before anything loads (bad values, missing GPUs, logins,
builders, re-scoring input), and W&B as a dashboard."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cactus_bench.app import run as run_mod
from cactus_bench.app.config import ConfigError, validate
from cactus_bench.app.store import run_dir
from cactus_bench.report import load_spec, render_table

from .helpers.cli import run_main
from .helpers.configs import cfg_of
from .helpers.guards import refuse
from .helpers.runs import TINY as SMALL_RUN

ROOT = Path(__file__).resolve().parents[1]


TINY = (*SMALL_RUN, "method=sps")


def cli(*args, env=None):
    """`python -m cactus_bench ARGS`, in this process (what it prints and its exit status)."""
    from cactus_bench.__main__ import main

    return run_main(main, *args, env=env)


def one_paragraph(out) -> str:
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr
    return " ".join(out.stderr.split())


def test_an_empty_table_never_replaces_a_file(tmp_path):
    (tmp_path / "table1.md").write_text("committed table")
    md, _ = render_table(load_spec(ROOT / "sweeps" / "table1.yaml"), [], tmp_path)
    assert "table1" in md.lower() and (tmp_path / "table1.md").read_text() == "committed table"
    assert not (tmp_path / "table1.csv").exists()


# --- values that must not slip through ------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["delta=inf"], "delta=inf is not valid: a finite number"),
        (["sampling.temperature=nan"], "sampling.temperature=nan is not valid"),
        (["m=1000", "max_gen_toks=48"], r"m=1000 is not valid.*max_gen_toks=48"),
        (["+temperature=-1"], "temperature is not a setting of a run. It lives at sampling.temperature"),
        (["+detla=0.5"], "Did you mean delta"),
        (["shard=2/2"], "shard='2/2' is not valid"),
        (["pair.dtype=foo"], "pair.dtype='foo' is not valid"),
        (["pair.device=gpu0"], "pair.device='gpu0' is not valid"),
    ],
)
def test_bad_values_are_refused_before_anything_loads(overrides, match):
    with pytest.raises(ConfigError, match=match):
        validate(cfg_of(*overrides))


def test_a_gpu_device_without_a_gpu_is_refused():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        validate(cfg_of("pair.device=cuda"))


def test_wandb_without_a_login_is_refused_and_offline_is_fine(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(ConfigError, match="wandb login"):
        validate(cfg_of("tracking=wandb"))
    validate(cfg_of("tracking=wandb", "tracking.mode=offline"))


def test_unused_settings_are_ignored_with_one_line(caplog):
    with caplog.at_level("INFO", logger="cactus_bench"):
        validate(cfg_of("method=sps", "delta=0.75"))
        validate(cfg_of("method=ar", "m=0"))  # m means nothing to the verifier alone: accepted, noted
    notes = [r.getMessage() for r in caplog.records]
    assert "note: delta=0.75 is not used by method=sps (ignored)" in notes
    assert "note: m=0 is not used by method=ar (ignored)" in notes


def test_the_embedded_pair_has_a_short_default_budget():
    assert cfg_of("pair=tiny").max_gen_toks == 128 and cfg_of().max_gen_toks == 4096
    assert cfg_of("pair=tiny", "max_gen_toks=32").max_gen_toks == 32


def test_a_waiting_builder_says_so(tmp_path):
    import fcntl

    from cactus_bench.embedded.build import _locked

    lock = tmp_path / "pair.lock"
    held = open(lock, "a")
    fcntl.flock(held, fcntl.LOCK_EX)
    threading.Timer(0.5, lambda: (fcntl.flock(held, fcntl.LOCK_UN), held.close())).start()
    said = []
    with _locked(lock, said.append):
        pass
    assert said and "waiting for another process" in said[0]


# --- the command line -----------------------------------------------------------------------------------


def test_help_is_fast_and_lists_the_settings():
    start = time.perf_counter()  # a real process: what a user waits for
    out = subprocess.run([sys.executable, "-m", "cactus_bench", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and time.perf_counter() - start < 5
    for word in ("pair", "method", "data", "sampling", "delta=", "m=", "shard=", "Examples"):
        assert word in out.stdout


def test_validation_errors_come_before_the_heavy_imports(tmp_path):
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('HEAVY', sorted(m for m in ('lm_eval', 'transformers', 'datasets') "
        "if m in sys.modules), file=sys.stderr))\n"
        "sys.argv = ['cactus_bench', 'delta=-1']\n"
        "import runpy\n"
        "runpy.run_module('cactus_bench', run_name='__main__', alter_sys=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2 and "delta=-1.0 is not valid" in out.stderr
    assert "HEAVY []" in out.stderr
    assert not (tmp_path / "outputs").exists() and not list(tmp_path.glob("*.log"))  # nothing left behind


def test_load_failures_are_one_paragraph_naming_the_key(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "CACTUS_BENCH_RESULTS": str(tmp_path)}
    text = one_paragraph(cli("pair.drafter=/nonexistent/drafter", "pair.verifier=nobody/missing-model", env=env))
    assert "pair.drafter=/nonexistent/drafter does not exist: point it at a model folder" in text
    assert "pair.verifier=nobody/missing-model is not in the local hub cache" in text  # both, before either loads
    debug = cli("--debug", "pair.drafter=/nonexistent/drafter", env=env)
    assert debug.returncode == 2 and "Traceback" in debug.stderr


def test_unknown_top_level_keys_fail_on_the_command_line(tmp_path):
    text = one_paragraph(cli("+detla=0.5", env={"CACTUS_BENCH_RESULTS": str(tmp_path)}))
    assert "detla is not a setting of a run" in text


# --- re-scoring --------------------------------------------------------------------------------------------


def score_cli(*args):
    from cactus_bench.score import main

    return run_main(main, *args, prog="cactus_bench.score")


@pytest.mark.parametrize(
    "content,match",
    [
        ('{"id": 1, "response": "a"}\n{"id": 1, "response": "b"}\n', "id 1 appears twice"),
        ("", "no responses in"),
        ('{"id": 1, "response": null}\n', "not text"),
    ],
)
def test_bad_response_files_are_one_line_errors(tmp_path, content, match):
    path = tmp_path / "responses.jsonl"
    path.write_text(content)
    out = score_cli("data=gsm8k", f"responses={path}")
    assert out.returncode == 2 and match in out.stderr and "Traceback" not in out.stderr


def test_score_needs_data_and_checks_a_run_folders_dataset(tmp_path, small_pair_dir):
    out = score_cli(f"responses={tmp_path}")
    assert out.returncode == 2 and "data= is required" in out.stderr and "Traceback" not in out.stderr
    cfg = cfg_of(*TINY, "limit=1", results=tmp_path / "runs", pair_dir=small_pair_dir)
    run_mod.run(cfg)
    out = score_cli("data=ifeval", f"responses={run_dir(cfg)}")
    assert out.returncode == 2 and "holds a run on arith, not ifeval" in out.stderr


# --- W&B as a dashboard ------------------------------------------------------------------------------------


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
    records = next(offline[-1].glob("*.wandb")).read_bytes()
    for key in (
        b"sample/accepted_length",
        b"sample/score",
        b"sample/stopped_on_length",
        b"accepted_length_histogram",
        b"speedup",
        b"rej",
    ):
        assert key in records, key


def test_the_dashboard_description_reads_only_what_runs_log():
    """Every panel key of dashboards/wandb.yaml is a config key, a tracked summary metric or a per-sample
    series the tracker logs: a renamed metric breaks this test, not the dashboard."""
    from cactus_bench.app.tracking import SAMPLE_KEYS, summary_keys, wandb_config
    from cactus_bench.dashboard import keys, load
    from cactus_bench.metrics import METRICS

    config_keys = set(wandb_config(cfg_of("pair=tiny")))
    summary = set(summary_keys()) | {m.name for m in METRICS.values() if m.relative is not None}
    history = {f"sample/{k}" for k in (*SAMPLE_KEYS, "score", "stopped_on_length", "new_tokens", "wall_time")}
    for key in keys(load()):
        kind, _, name = key.partition(":")
        assert name in {"config": config_keys, "summary": summary, "history": history}[kind], key


def test_offline_everything_missing_is_named_at_once_before_anything_loads(tmp_path, monkeypatch, caplog):
    """Without network a run retried the hub for half a minute per file, then named one missing thing at a
    time (the verifier, then the data). Now: offline at once, the local data copy used when there is one, and
    every missing model and dataset in one paragraph, each with its fix."""
    import logging

    from cactus_bench.app import offline
    from cactus_bench.benchmarks.data import DataError

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(offline, "hub_reachable", lambda: False)
    offline.go_offline_without_network()
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"

    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded a model before naming what is missing"))
    cfg = cfg_of("method=cactus", "data=gsm8k", "paths.data=/nonexistent", results=tmp_path)
    with pytest.raises(DataError) as e:
        run_mod.run(cfg)
    said = " ".join(str(e.value).split())
    assert "data root '/nonexistent'" in said and "pair.verifier=Qwen/Qwen3-8B is not in the local hub cache" in said
    assert "pair.drafter=Qwen/Qwen3-0.6B" in said and "huggingface-cli download" in said
    with pytest.raises(DataError, match="pair.verifier=/no/such/model does not exist: point it at a model folder"):
        run_mod.run(cfg_of("method=ar", "data=arith", "pair.verifier=/no/such/model", results=tmp_path))

    caplog.set_level(logging.INFO, "cactus_bench")
    monkeypatch.setattr(offline, "LOCAL_DATA", tmp_path)  # the copy beside the checkout
    local = cfg_of("data=gsm8k", "paths.data=null")  # no data folder set
    offline.use_local_data(local)
    assert local.data.root == str(tmp_path) and "reading the benchmark files from" in caplog.text
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online: the hub, as configured
    online = cfg_of("data=gsm8k", "paths.data=null")
    offline.use_local_data(online)
    assert online.data.root is None

"""No silent wrong numbers: timings cover what they claim and every reader shows a timed metric's caveat,
seeds pool by item, tables of another store go beside it, damaged files and signals end in one paragraph.
(The store's own guarantees are in test_store.py, the lock's in test_lock.py.)"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cactus_bench.app import run as run_mod
from cactus_bench.app.runs import load_runs
from cactus_bench.app.store import read_samples_file, run_dir
from cactus_bench.benchmarks.data import DataError
from cactus_bench.report import build_table, render_table

from .helpers.cli import run_main
from .helpers.configs import cfg_of, pair_overrides
from .helpers.runs import TINY, demo_spec, run_cell

ROOT = Path(__file__).resolve().parents[1]


# --- wrong numbers, silently -------------------------------------------------------------------------------


def test_paired_timing_added_on_resume_times_every_item(small_pair_dir, tmp_path):
    """limit=2 untimed, then limit=4 with paired_timing: the paired speedup covers all 4 items, not 2."""
    run_cell("sps", results=tmp_path, pair_dir=small_pair_dir, limit=2)
    summary = run_cell("sps", "paired_timing=true", results=tmp_path, pair_dir=small_pair_dir, limit=4)
    assert summary["paired_speedup_n"] == 4
    again = run_cell("sps", "paired_timing=true", results=tmp_path, pair_dir=small_pair_dir, limit=4)
    folder = run_dir(cfg_of(*TINY, "method=sps", results=tmp_path, pair_dir=small_pair_dir))
    assert again["paired_speedup_n"] == 4 and len((folder / "timing.jsonl").read_text().splitlines()) == 4


def test_a_batched_run_times_its_sample_and_withholds_task_time(small_pair_dir, tmp_path):
    """batch_size=4 with timing_sample=3: the paired speedup says n=3; the task-time speedup of batched
    runs is withheld with its reason, not shown."""
    common = ("batch_size=4", "timing_sample=3")
    for method in ("ar", "sps"):
        run_cell(method, *common, results=tmp_path, pair_dir=small_pair_dir)
    spec = {**demo_spec(), "columns": ["score", "paired_speedup", "speedup"], "batch_size": 4, "timing_sample": 3}
    md, _ = render_table(spec, load_runs(tmp_path), tmp_path / "t", pair_overrides(small_pair_dir))
    sps = next(line for line in md.splitlines() if line.startswith("| SpS"))
    assert "n=3" in sps and "withheld, the runs were decoded in batches" in md


def test_replies_scored_as_another_dataset_are_refused(small_pair_dir, tmp_path):
    """A run's samples name their dataset: copied out of the run folder, they are still refused as GSM8K."""
    from cactus_bench.score import read_responses

    run_cell("sps", results=tmp_path, pair_dir=small_pair_dir, limit=3)
    copied = tmp_path / "replies.jsonl"
    folder = run_dir(cfg_of(*TINY, "method=sps", results=tmp_path, pair_dir=small_pair_dir))
    copied.write_text((folder / "samples.jsonl").read_text())
    with pytest.raises(DataError, match="answers arith, not gsm8k: score it with data=arith"):
        read_responses(copied, "gsm8k")
    assert len(read_responses(copied, "arith")) == 3


# --- pre-emption and faults ------------------------------------------------------------------------------------


def slow_run(tmp_path, pair_dir, *extra):
    """A CLI run that takes a while (the verifier alone on 200 GSM8K prompts), for signals."""
    env = {**os.environ, "CACTUS_BENCH_RESULTS": str(tmp_path)}
    args = ["pair=tiny", "data=gsm8k", "method=ar", "limit=200", "max_gen_toks=64", "progress=false"]
    cmd = [sys.executable, "-m", "cactus_bench", *args, *pair_overrides(pair_dir), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_samples(root: Path, pattern: str, n: int = 1, timeout: float = 120) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for path in root.glob(pattern):
            if len(read_samples_file(path)) >= n:
                return path
        time.sleep(0.05)
    raise AssertionError("no samples appeared")


@pytest.mark.parametrize("sig,code,name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_signal_ends_a_run_in_one_line_with_the_store_intact(small_pair_dir, tmp_path, sig, code, name):
    """SIGTERM (scancel, pre-emption) like Ctrl-C: the sample in flight is dropped, every stored line is
    whole, the lock released, the run marked interrupted, one line said; the same command resumes."""
    proc = slow_run(tmp_path, small_pair_dir)
    samples = wait_for_samples(tmp_path / "runs", "gsm8k/small/ar_s0_*/samples.jsonl")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert f"interrupted ({name})" in err and "Traceback" not in err
    folder = samples.parent
    assert all(line.endswith("}") for line in samples.read_text().splitlines())  # nothing torn
    assert not (folder / ".lock").exists()
    assert json.loads((folder / "manifest.json").read_text())["status"] == "interrupted"


# --- a calm command line --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override,says",
    [
        ("detla=0.5", "detla is not a setting of a run. Did you mean delta?"),
        ("results_dir=/x", "results_dir was renamed: use paths.runs (the runs folder;"),  # before: "not a setting"
        ("method=cactuss", "method=cactuss is not valid (did you mean cactus?): choose one of ar, cactus"),
        ("m=ten", "m='ten' is not valid: an integer is needed"),
        ("limit=1.5", "limit='1.5' is not valid: an integer is needed"),
    ],
)
def test_what_hydra_refuses_is_one_paragraph(override, says, tmp_path):
    from cactus_bench.__main__ import main

    out = run_main(main, override, env={"CACTUS_BENCH_RESULTS": str(tmp_path)})
    assert out.returncode == 2 and "Traceback" not in out.stderr and "HYDRA_FULL_ERROR" not in out.stderr
    assert says in " ".join(out.stderr.split())


@pytest.mark.parametrize("flags", [("--cfg", "job"), ("-c", "job"), ("--cfg=job",), ("--info", "defaults")])
def test_hydras_flags_with_their_value_as_the_next_word_work(flags):
    """`--cfg job` and `-c job` (how Hydra users type them) failed: `job` was read as an override."""
    from cactus_bench.__main__ import main

    out = run_main(main, *flags, "method=sps", "pair=tiny")
    assert out.returncode == 0, out.stderr
    assert "name: sps" in out.stdout or "method: sps" in out.stdout or "Defaults" in out.stdout


def test_a_sweep_checks_every_cell_before_running_any(tmp_path, monkeypatch):
    from cactus_bench import sweep

    monkeypatch.setattr(run_mod, "run", lambda *a, **k: pytest.fail("a cell ran before every cell was checked"))
    out = run_main(
        sweep.main,
        "sweeps/lossy_tradeoff.yaml",
        "pair=tiny",
        "limit=3",
        "max_gen_toks=16",
        "data=arith",
        env={"CACTUS_BENCH_RESULTS": str(tmp_path)},
        prog="cactus_bench.sweep",
    )
    text = " ".join(out.stderr.split())
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "lossy_tradeoff, cell SpS on arith (tiny): m=20 is not valid" in text


def test_a_multirun_files_its_launcher_files_under_the_results_folder(tmp_path):
    from hydra import compose, initialize_config_dir

    from cactus_bench.app.schema import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", [f"paths.results={tmp_path}"], return_hydra_config=True)
    assert str(cfg.hydra.sweep.dir).startswith(f"{tmp_path}/multirun/")


def test_report_says_written_only_when_it_wrote(tmp_path):
    from cactus_bench.report.__main__ import main

    out = run_main(main, "table", "sweeps/table1.yaml", f"results={tmp_path}", f"out={tmp_path / 't'}")
    assert out.returncode == 0 and "written:" not in out.stdout and not (tmp_path / "t").exists()


def test_scores_are_named_after_the_whole_folder():
    from cactus_bench.score import default_output

    name = default_output(Path("results/runs/gsm8k/tiny/cactus-delta1.0_m10_s0_abc123")).name
    assert name == "cactus-delta1.0_m10_s0_abc123.scores.json"


# --- batched runs resume at any batch size ---------------------------------------------------------------------


def test_every_reader_shows_a_timed_metric_with_the_same_caveat(small_pair_dir, tmp_path, monkeypatch):
    """SpS against a verifier-alone run decoded in batches: the task-time speedup is withheld (a batched
    item's wall time is not its own) by the table, Figure 3, W&B and the CLI's last lines alike, each
    saying why (one reading, `metrics.read`). Before, the figure and W&B showed the raw ratio."""
    from cactus_bench.__main__ import main
    from cactus_bench.report import figures

    logged = {}

    class FakeRun:
        summary = logged

        def log(self, *a, **k):
            pass

        def finish(self, **k):
            pass

    import wandb

    monkeypatch.setattr(wandb, "init", lambda **k: FakeRun())
    run_cell("ar", "batch_size=4", results=tmp_path, pair_dir=small_pair_dir, limit=4)
    overrides = [*TINY, "method=sps", "limit=4", "tracking=wandb", *pair_overrides(small_pair_dir)]
    out = run_main(main, *overrides, f"paths.runs={tmp_path}")
    assert out.returncode == 0, out.stderr
    caveat = "speedup (task time): withheld, the runs were decoded in batches"
    cli = [line for line in out.stdout.splitlines() if line.startswith("⚠")]
    assert cli and caveat in cli[0], out.stdout[-1500:]
    assert "speedup" not in logged and caveat in logged["speedup_caveat"]
    spec = {**demo_spec(), "columns": ["score", "speedup"]}
    md, _ = render_table(spec, load_runs(tmp_path), tmp_path / "t", pair_overrides(small_pair_dir))
    assert caveat in md
    figures(load_runs(tmp_path), tmp_path / "figs")
    notes = next((tmp_path / "figs").glob("fig3_speedup_*_notes.txt")).read_text()
    assert caveat in notes


def test_several_seeds_are_runs_of_their_own_and_a_table_pools_them_by_item(small_pair_dir, tmp_path):
    """A spec with `seeds: [0, 1]` sweeps every cell once per seed (each its own run); its table pools a
    cell's seeds item by item: n is the items, and an interval is clustered by item (an item's counters
    summed over its seeds are one unit), not computed as if the 2n decodes were independent."""
    from cactus_bench.metrics import ratio_interval
    from cactus_bench.sweep import spec_cells

    spec = {**demo_spec(limit=4), "seeds": [0, 1], "columns": ["score", "accepted_length"]}
    assert len(spec_cells(spec)) == 2 * len(spec["rows"])
    for seed in (0, 1):
        for method in ("ar", "sps"):
            run_cell(method, f"seed={seed}", results=tmp_path, pair_dir=small_pair_dir, limit=4)
    spec["rows"] = [r for r in spec["rows"] if r["method"] in ("ar", "sps")]
    spec["intervals"] = ["accepted_length"]
    df, notes = build_table(spec, load_runs(tmp_path), pair_overrides(small_pair_dir))
    assert any("each cell pools 2 seeds (0, 1)" in n for n in notes)
    decodes = [s for r in load_runs(tmp_path) if r.identity.method == "sps" for s in r.samples]
    items = {}
    for s in decodes:
        a, b = items.get(s["id"], (0, 0))
        items[s["id"]] = (a + s["stats"]["accepted"], b + s["stats"]["verifier_calls"])
    clustered = ratio_interval(list(items.values()))
    independent = ratio_interval([(s["stats"]["accepted"], s["stats"]["verifier_calls"]) for s in decodes])
    cell = df[(df["label"] == "SpS") & (df["metric"] == "accepted_length")].iloc[0]
    assert cell["ours"] == pytest.approx(clustered.value)
    assert list(cell["ci"]) == pytest.approx([clustered.low, clustered.high])
    assert list(cell["ci"]) != pytest.approx([independent.low, independent.high])  # the 2n decodes as units
    assert df[(df["label"] == "SpS") & (df["metric"] == "n")].iloc[0]["ours"] == 4


def test_a_runs_summary_stores_its_paired_difference_from_the_verifier(small_pair_dir, tmp_path):
    """Run after the setting's verifier-alone run, a method's summary carries Δ score vs the verifier with its
    paired interval and n (what the CLI prints at the end of the run); without that run, no Δ."""
    lone = run_cell("sps", results=tmp_path / "alone", pair_dir=small_pair_dir, limit=3)
    assert "score_delta" not in lone
    run_cell("ar", results=tmp_path, pair_dir=small_pair_dir, limit=3)
    summary = run_cell("sps", results=tmp_path, pair_dir=small_pair_dir, limit=3)
    folder = run_dir(cfg_of(*TINY, "method=sps", "limit=3", results=tmp_path, pair_dir=small_pair_dir))
    stored = json.loads((folder / "summary.json").read_text())
    assert stored["score_delta_n"] == 3 and len(stored["score_delta_ci"]) == 2
    assert stored["score_delta"] == summary["score_delta"]


def test_damaged_files_are_one_paragraph_in_report_and_score(small_pair_dir, tmp_path):
    """`report table` on a store with a line damaged in the middle, and `score` on a responses file that is
    not UTF-8, ended in tracebacks (report's own, Hydra's)."""
    from cactus_bench.report.__main__ import main as report_main
    from cactus_bench.score import DataError, read_responses

    cfg = cfg_of(*TINY, "method=sps", "limit=3", results=tmp_path / "runs", pair_dir=small_pair_dir)
    run_mod.run(cfg)
    samples = run_dir(cfg) / "samples.jsonl"
    lines = samples.read_bytes().split(b"\n")
    samples.write_bytes(b"\n".join([lines[0], lines[1][:20], *lines[2:]]))  # cut in the middle
    spec = ROOT / "sweeps" / "demo.yaml"
    with pytest.raises(SystemExit, match=r"error: .*samples.jsonl, line 2, is not a valid sample.*sed -i '2d'"):
        report_main(
            [
                "table",
                str(spec),
                f"results={tmp_path / 'runs'}",
                f"out={tmp_path / 't'}",
                "limit=3",
                "m=2",
                "max_gen_toks=8",
                *pair_overrides(small_pair_dir),
            ]
        )
    replies = tmp_path / "replies.jsonl"
    replies.write_bytes(b'{"id": "0", "response": "#### 4"}\n{"id": "1", "response": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"replies.jsonl:2: not UTF-8 text .* save the file as UTF-8"):
        read_responses(replies, "arith")


def test_a_table_of_another_store_is_written_beside_it(small_pair_dir, tmp_path, monkeypatch):
    """`report table results=<other store>` wrote into results/tables/, replacing the default store's table
    of the same spec."""
    from cactus_bench.report.__main__ import main as report_main

    home = tmp_path / "home"
    monkeypatch.setenv("CACTUS_BENCH_RESULTS", str(home))
    (home / "tables").mkdir(parents=True)
    (home / "tables" / "demo.md").write_text("the default store's table")
    other = tmp_path / "other" / "runs"
    run_cell("sps", results=other, pair_dir=small_pair_dir, limit=2)
    report_main(
        [
            "table",
            str(ROOT / "sweeps" / "demo.yaml"),
            f"results={other}",
            "limit=2",
            "m=2",
            "max_gen_toks=8",
            *pair_overrides(small_pair_dir),
        ]
    )
    assert (home / "tables" / "demo.md").read_text() == "the default store's table"
    assert list((tmp_path / "other" / "tables").glob("demo*.md"))

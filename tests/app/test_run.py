"""One run end to end on the small pair: the store, every benchmark, paired timing, resume, W&B, subsets, progress."""

import json
from pathlib import Path

import pytest

from cactus_bench.adapters.benchmarks.task import TaskBenchmark
from cactus_bench.app import method_configs  # noqa: F401  (the method group Hydra composes)
from cactus_bench.app import run as run_mod
from cactus_bench.app.config import validate
from cactus_bench.app.store import RunStore, run_dir

from ..helpers.cli import cli, one_paragraph
from ..helpers.configs import cfg_of, pair_overrides
from ..helpers.runs import TINY, run_killed_after

# --- end to end on the small pair ----------------------------------------------------------------------


def test_end_to_end_run_writes_a_complete_store(small_pair_dir, tmp_path):
    cfg = cfg_of(
        "pair=tiny",
        "data=arith",
        "method=cactus",
        "delta=0.75",
        "limit=3",
        "m=3",
        "max_gen_toks=12",
        "progress=false",
        results=tmp_path,
        pair_dir=small_pair_dir,
    )
    summary = run_mod.run(cfg)
    folder = run_dir(cfg)
    assert {p.name for p in folder.iterdir()} >= {"config.yaml", "manifest.json", "samples.jsonl", "summary.json"}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["environment"]["packages"]["torch"]
    assert "git_commit" in manifest["environment"] and manifest["environment"]["hardware"]["cpu_count"]
    samples = RunStore(folder).samples()
    assert [s["index"] for s in samples] == [0, 1, 2]
    for s in samples:
        assert {"id", "response", "tokens", "stats", "scores", "prompt_sha256"} <= set(s)
        assert "exact_match,strict-match" in s["scores"] and len(s["prompt_sha256"]) == 64
    assert summary["samples"] == 3 and summary["score"] is not None and summary["accepted_length"] is not None
    assert summary["target_kl"] is not None and summary["length_stopped"] is not None
    from cactus_bench.tools.score import read_responses, score_responses

    rescored = score_responses("arith", read_responses(folder))  # stored raw replies, the same filters
    assert rescored["metrics"] == summary["scores"]


@pytest.mark.parametrize("data", ["gsm8k", "ifeval", "gpqa"])
def test_each_benchmark_runs_end_to_end_with_the_tiny_pair(small_pair_dir, tmp_path, data):
    cfg = cfg_of(
        "pair=tiny",
        f"data={data}",
        "method=sps",
        "limit=2",
        "m=2",
        "max_gen_toks=8",
        "progress=false",
        results=tmp_path,
        pair_dir=small_pair_dir,
    )
    summary = run_mod.run(cfg)
    assert summary["samples"] == 2 and summary["scores"] and summary["verifier_calls"] > 0


def test_specbench_runs_and_writes_its_answer_schema(small_pair_dir, tmp_path):
    common = ["pair=tiny", "data=specbench", "limit=2", "max_gen_toks=6", "data.warmup=1", "progress=false"]
    summaries = {}
    for method in ("ar", "cactus"):
        cfg = cfg_of(*common, f"method={method}", "m=2", results=tmp_path, pair_dir=small_pair_dir)
        summaries[method] = run_mod.run(cfg)
    model_id = f"{cfg.pair.name}-cactus-delta1.0_m2-T0.6-k20-p0.95"
    answers = [json.loads(x) for x in (run_dir(cfg) / f"{model_id}.jsonl").read_text().splitlines()]
    assert {a["model_id"] for a in answers} == {model_id} and len({a["answer_id"] for a in answers}) == 2
    assert len(answers) == 2 and len(answers[0]["choices"][0]["turns"]) == 2  # MT-bench: two turns
    assert set(answers[0]) == {"question_id", "category", "answer_id", "model_id", "tstamp", "choices"}
    assert {"decoding_steps", "new_tokens", "wall_time", "accept_lengths"} <= set(answers[0]["choices"][0])
    assert summaries["cactus"]["specbench"]["mt_bench"]["tau"] >= 1


def test_paired_timing_decodes_the_verifier_alone_beside_each_item(small_pair_dir, tmp_path):
    """Each item's verifier-alone decode is the verifier-alone run's own (same seed, same tokens), timed
    back to back with the method's, first on every other item; the run's identity does not change."""
    common = ("pair=tiny", "data=arith", "limit=4", "m=2", "max_gen_toks=10", "progress=false")
    ar_cfg = cfg_of(*common, "method=ar", results=tmp_path, pair_dir=small_pair_dir)
    run_mod.run(ar_cfg)
    cfg = cfg_of(*common, "method=sps", "paired_timing=true", results=tmp_path, pair_dir=small_pair_dir)
    summary = run_mod.run(cfg)
    samples, ar_samples = RunStore(run_dir(cfg)).samples(), RunStore(run_dir(ar_cfg)).samples()
    assert [s["stats"]["paired_baseline_first"] for s in samples] == [True, False, True, False]
    assert [s["stats"]["paired_baseline_tokens"] for s in samples] == [len(a["tokens"]) for a in ar_samples]
    assert all(s["stats"]["paired_baseline_time"] > 0 and s["stats"]["paired_method_time"] > 0 for s in samples)
    assert summary["paired_speedup"] > 0 and summary["paired_speedup_n"] == 4
    assert summary["paired_speedup_ci"] is None  # 4 items: too few for an interval (intervals.MIN_ITEMS)
    for s in samples:  # the cost model's parts: this decode's own counts, its times inside its wall time
        st = s["stats"]
        assert (st["paired_method_tokens"], st["paired_method_calls"]) == (st["new_tokens"], st["verifier_calls"])
        assert st["paired_method_drafted"] == st["drafted"]
        inside = st["paired_method_prefill_time"] + st["paired_method_draft_time"] + st["paired_method_verify_time"]
        assert 0 < inside < st["paired_method_time"]
        assert 0 < st["paired_baseline_verify_time"] + st["paired_baseline_prefill_time"] < st["paired_baseline_time"]
    # every item timed: the prediction from the parts is the measurement (docs/statistics.md)
    assert summary["predicted_speedup"] == pytest.approx(summary["paired_speedup"], rel=1e-9)
    assert 0 < summary["cost_ratio"] and summary["item_paired_speedup"] > 0
    assert run_dir(cfg) == run_dir(cfg_of(*common, "method=sps", results=tmp_path, pair_dir=small_pair_dir))
    assert run_mod.run(ar_cfg)["paired_speedup"] is None  # the verifier alone is not paired with itself


def test_killed_run_resumes_without_duplicates_or_recomputation(small_pair_dir, tmp_path, monkeypatch):
    args = ("pair=tiny", "data=arith", "method=sps", "limit=5", "m=2", "max_gen_toks=10", "progress=false")
    cfg = cfg_of(*args, results=tmp_path, pair_dir=small_pair_dir)
    calls = run_killed_after(cfg, 2, monkeypatch)  # killed mid-run
    folder = run_dir(cfg)
    assert json.loads((folder / "manifest.json").read_text())["status"] == "interrupted"
    with open(folder / "samples.jsonl", "a") as f:
        f.write('{"index": 2, "id": 2, "respo')  # a write cut off by the crash
    real = TaskBenchmark.decode

    def record_calls(self, decoder, items):
        calls.extend(item.index for item in items)
        return real(self, decoder, items)

    monkeypatch.setattr(TaskBenchmark, "decode", record_calls)
    summary = run_mod.run(cfg_of(*args, results=tmp_path, pair_dir=small_pair_dir))
    assert calls == [0, 1, 2, 3, 4]  # 0 and 1 were not recomputed; 2 (half-written) was
    indices = [s["index"] for s in RunStore(folder).samples()]
    assert indices == [0, 1, 2, 3, 4] and summary["samples"] == 5


def test_a_larger_limit_continues_the_same_run(small_pair_dir, tmp_path):
    args = ("pair=tiny", "data=arith", "method=ar", "max_gen_toks=6", "progress=false")
    first = cfg_of(*args, "limit=2", results=tmp_path, pair_dir=small_pair_dir)
    run_mod.run(first)
    second = cfg_of(*args, "limit=4", results=tmp_path, pair_dir=small_pair_dir)
    assert run_dir(first) == run_dir(second)
    assert run_mod.run(second)["samples"] == 4


def test_wandb_offline_writes_files(small_pair_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    cfg = cfg_of(
        "pair=tiny",
        "data=arith",
        "method=cactus",
        "limit=2",
        "m=2",
        "max_gen_toks=8",
        "tracking=wandb",
        "progress=false",
        results=tmp_path,
        pair_dir=small_pair_dir,
    )
    run_mod.run(cfg)
    offline = list(run_dir(cfg).glob("wandb/offline-run-*"))
    assert offline and any(p.suffix == ".wandb" for p in offline[0].iterdir())
    assert (run_dir(cfg) / "accepted_length.png").exists()  # the run's figure, logged to W&B
    media = list(offline[0].glob("files/media/**/*"))
    assert any("samples" in str(p) for p in media) and any("figures" in str(p) for p in media)


def test_a_subset_of_a_run_recomputes_every_score_it_shows():
    """`Run.restricted` (a table over the items every cell shares) recomputed `score` but kept the full
    run's `scores` beside it: both now come from the same items."""
    from cactus_bench.app.runs import Run

    config = {"data": {"kind": "task", "primary_metric": "exact_match,strict-match"}}
    samples = [
        {"id": i, "scores": {"exact_match,strict-match": float(i < 2), "other,none": 1.0}, "stats": {}}
        for i in range(4)
    ]
    full = Run(
        Path("x"), config, {"scores": {"exact_match,strict-match": 0.5, "other,none": 1.0}, "score": 50.0}, samples
    )
    part = full.restricted({0, 1})
    assert part.summary["score"] == 100.0 and part.summary["scores"] == {
        "exact_match,strict-match": 1.0,
        "other,none": 1.0,
    }


def test_a_subsets_label_is_stored_and_an_unused_timing_sample_is_said(small_pair_dir, tmp_path, caplog):
    """summary.json said `data: gpqa` for every GPQA subset (now the label, as the folder does), and
    timing_sample=N at batch size 1 was ignored without a word."""
    import logging

    caplog.set_level(logging.INFO, "cactus_bench")
    cfg = cfg_of(
        "pair=tiny",
        "data=arith",
        "data.label=arith_b",
        "method=sps",
        "m=2",
        "max_gen_toks=8",
        "limit=1",
        "timing_sample=5",
        "progress=false",
        results=tmp_path,
        pair_dir=small_pair_dir,
    )
    assert run_mod.run(cfg)["data"] == "arith_b"
    assert json.loads((run_dir(cfg) / "summary.json").read_text())["data"] == "arith_b"
    assert "timing_sample=5 is not used at batch_size=1" in caplog.text
    caplog.clear()
    validate(cfg_of("timing_sample=5", "batch_size=4"))
    assert "timing_sample" not in caplog.text  # control: batched, it is used


def test_progress_off_a_terminal_is_a_line_per_tenth_of_the_items():
    """A log file got thousands of carriage-return updates from the bar; now ten lines, and a bar on a TTY."""
    import io

    from cactus_bench.app.progress import LineProgress, progress

    log = io.StringIO()
    bar = progress(25, "sps arith", True, stream=log)
    assert isinstance(bar, LineProgress)
    for i in range(25):
        bar.set_postfix(AL=f"{i}")
        bar.update()
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 9 and lines[-1] == "sps arith: 25/25 AL=24"

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    bar = progress(25, "sps arith", True, stream=Terminal())
    assert not isinstance(bar, LineProgress)
    assert bar.smoothing == 0  # time left from the average rate: a batched run's first burst misled the default


def test_the_tiny_pair_on_another_dataset_says_its_scores_mean_nothing(caplog, monkeypatch):
    """The embedded pair only knows arith: its GSM8K replies are noise, said where a user looks (the run's
    first lines, once per process), and not said on arith."""
    import logging

    from cactus_bench.app import config as config_mod

    monkeypatch.setattr(config_mod, "_SAID", set())  # a fresh process
    caplog.set_level(logging.INFO, "cactus_bench")
    validate(cfg_of("pair=tiny", "data=gsm8k"))
    assert "the embedded tiny pair knows only arith: its replies on gsm8k are noise" in caplog.text
    caplog.clear()
    validate(cfg_of("pair=tiny", "data=gsm8k", "method=sps"))  # another cell of a sweep: said once
    assert "knows only arith" not in caplog.text
    validate(cfg_of("pair=tiny", "data=arith"))
    assert "knows only arith" not in caplog.text


def test_the_progress_line_outside_a_terminal_shows_the_item_it_counts(small_pair_dir, tmp_path, monkeypatch):
    """Outside a terminal (a log, CI, SLURM) a run prints a line per tenth of its items. The line was printed
    before the item's figures were added, so the last one showed the run one item short (AL 1.13 against the
    summary's 0.73): the last line now carries the summary's AL."""
    import io

    from cactus_bench.app.progress import LineProgress

    stream = io.StringIO()
    monkeypatch.setattr(run_mod, "progress", lambda total, desc, enabled: LineProgress(total, desc, stream))
    summary = run_mod.run(
        cfg_of("pair=tiny", "data=arith", "method=sps", "m=2", "limit=5", results=tmp_path, pair_dir=small_pair_dir)
    )
    lines = stream.getvalue().splitlines()
    assert lines and lines[-1].startswith("sps arith: 5/5")
    assert f"AL={summary['accepted_length']:.2f}" in lines[-1], (lines, summary["accepted_length"])


def test_prompts_longer_than_the_context_are_named_before_anything_decodes(small_pair_dir, tmp_path):
    out = cli(*TINY[:-2], "method=sps", "limit=3", "max_gen_toks=8200", *pair_overrides(small_pair_dir),
              f"paths.runs={tmp_path}")  # fmt: skip
    said = one_paragraph(out)
    assert "context is 8192 tokens, but 3 of 3 request(s) need more" in said and "item 0 needs 8" in said, said
    assert "Lower max_gen_toks" in said and not list(tmp_path.rglob("samples.jsonl"))


def test_a_verifier_with_nan_weights_stops_the_run_in_one_paragraph(small_pair_dir, tmp_path):
    """NaN in `model.norm.weight` made the verifier emit " cook cook …", stored as valid samples with KL 0."""
    import shutil

    from safetensors.torch import load_file, save_file

    damaged = tmp_path / "damaged"
    shutil.copytree(small_pair_dir / "verifier", damaged)
    weights = load_file(damaged / "model.safetensors")
    weights["model.norm.weight"][0] = float("nan")
    save_file(weights, damaged / "model.safetensors", metadata={"format": "pt"})
    for method in ("sps", "ar"):
        out = cli(*TINY, f"method={method}", "limit=2", *pair_overrides(small_pair_dir), f"pair.verifier={damaged}",
                  f"paths.runs={tmp_path / 'runs'}")  # fmt: skip
        assert "the verifier" in one_paragraph(out) and "NaN or infinite logits" in one_paragraph(out)
    assert not [p for p in (tmp_path / "runs").rglob("samples.jsonl") if p.read_text().strip()]


def test_spec_benchs_own_arithmetic_on_the_export_gives_the_tables_speed_py_column(small_pair_dir, tmp_path):
    """`cactus-bench export specbench` lays a verifier-alone run and two SpS runs (greedy, sampled) out as
    Spec-Bench's scripts read them: speed.py's arithmetic on the files gives the table's speed.py column in
    every category, equal.py finds greedy SpS equal to greedy verifier-alone decoding, and each file is named
    by a model_id that tells sampled from greedy."""
    from transformers import AutoTokenizer

    from cactus_bench.adapters.benchmarks.base import specbench_cells
    from cactus_bench.app.runs import load_runs
    from cactus_bench.tools.export import main as export_main

    from ..helpers.cli import run_main
    from ..helpers.specbench import speed_py

    common = ["pair=tiny", "data=specbench", "limit=3", "max_gen_toks=8", "data.warmup=1", "progress=false", "m=2"]
    for extra in (["method=ar", "sampling=greedy"], ["method=sps", "sampling=greedy"], ["method=sps"]):
        run_mod.run(cfg_of(*common, *extra, results=tmp_path / "runs", pair_dir=small_pair_dir))
    runs = {r.identity.model_id: r for r in load_runs(tmp_path / "runs")}
    names = sorted(runs)
    assert names == ["small-ar-greedy", "small-sps_m2-T0.6-k20-p0.95", "small-sps_m2-greedy"], names
    ar, sps = runs["small-ar-greedy"], runs["small-sps_m2-greedy"]
    out = run_main(export_main, "specbench", ar.key, sps.key, f"results={tmp_path / 'runs'}", f"out={tmp_path / 'x'}")
    assert out.returncode == 0 and "speed.py: python evaluation/speed.py" in out.stdout, out.stderr[-2000:]
    files = {
        p.stem: [json.loads(line) for line in p.read_text().splitlines()] for p in (tmp_path / "x").glob("*.jsonl")
    }
    assert sorted(files) == ["small-ar-greedy", "small-sps_m2-greedy"]
    assert [str(a["choices"][0]["turns"]) for a in files["small-ar-greedy"]] == [
        str(a["choices"][0]["turns"]) for a in files["small-sps_m2-greedy"]
    ]  # equal.py's comparison: "Result totally Equal!"
    tokenizer = AutoTokenizer.from_pretrained(small_pair_dir / "verifier")
    cells = specbench_cells(sps, None, ar)
    for task in ("mt_bench", "overall"):
        expected = speed_py(
            files["small-sps_m2-greedy"], files["small-ar-greedy"], task, lambda t: tokenizer(t).input_ids
        )
        assert cells[task]["speedup_specbench"] == pytest.approx(expected, rel=1e-9), task
        # the run's own summary.json carries the same speedups, written against the stored verifier-alone run
        assert sps.summary["specbench"][task]["speedup_specbench"] == pytest.approx(expected, rel=1e-9), task
        assert sps.summary["specbench"][task]["speedup"] == pytest.approx(cells[task]["speedup"], rel=1e-12), task
    meta = json.loads((tmp_path / "x" / "small-sps_m2-greedy.meta.json").read_text())
    assert meta["batch_size"] == [1] and meta["caveats"] == [] and meta["answers"] == 3

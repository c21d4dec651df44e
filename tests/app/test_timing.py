"""Timed metrics (app/timing.py, metrics.py): paired timing covers what it claims, a batched run times its
sample and withholds task time, and every reader shows a timed metric with the same caveat."""

import json
from pathlib import Path

import pytest

from cactus_bench.app.runs import load_runs
from cactus_bench.app.store import run_dir
from cactus_bench.tools.report import render_table

from ..helpers.cli import run_main
from ..helpers.configs import cfg_of, pair_overrides
from ..helpers.runs import TINY, demo_spec, run_cell

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_timing_sample_times_decodes_without_the_kl_statistics(small_pair_dir, tmp_path, monkeypatch):
    """The timed decodes' statistics are dropped (the run's are the batched decode's), so they leave out the
    target and output KL, as the authors' timed code does; the batched decode that the KLs come from keeps
    them, and so do the decodes of paired_timing=true, whose statistics are the run's."""
    from cactus_bench.core.decode import engine as engine_mod

    built = []
    real = engine_mod.Engine.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        built.append((self.options.batch_size, self.rule is not None, self.options.statistics))

    monkeypatch.setattr(engine_mod.Engine, "__init__", spy)
    summary = run_cell("cactus", "batch_size=4", "timing_sample=2", results=tmp_path, pair_dir=small_pair_dir)
    assert summary["target_kl"] is not None and summary["paired_speedup_n"] == 2
    assert (4, True, True) in built and (1, True, False) in built and (1, False, False) in built, built
    built.clear()
    run_cell("cactus", "paired_timing=true", results=tmp_path / "paired", pair_dir=small_pair_dir, limit=2)
    assert (1, True, True) in built and all(kl for _, _, kl in built), built


def test_every_reader_shows_a_timed_metric_with_the_same_caveat(small_pair_dir, tmp_path, monkeypatch):
    """SpS against a verifier-alone run decoded in batches: the task-time speedup is withheld (a batched
    item's wall time is not its own) by the table, Figure 3, W&B and the CLI's last lines alike, each
    saying why (one reading, `metrics.read`). Before, the figure and W&B showed the raw ratio."""
    from cactus_bench.__main__ import main
    from cactus_bench.tools.report import figures

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
    assert any(caveat in line for line in cli), out.stdout[-1500:]  # a busy machine may add its own line
    assert "speedup" not in logged and caveat in logged["speedup_caveat"]
    spec = {**demo_spec(), "columns": ["score", "speedup"]}
    md, _ = render_table(spec, load_runs(tmp_path), tmp_path / "t", pair_overrides(small_pair_dir))
    assert caveat in md
    figures(load_runs(tmp_path), tmp_path / "figs")
    notes = next((tmp_path / "figs").glob("fig3_speedup_*_notes.txt")).read_text()
    assert caveat in notes


def test_a_runs_summary_stores_its_paired_difference_from_the_verifier(small_pair_dir, tmp_path):
    """Run after the setting's verifier-alone run, a method's summary carries Δ score vs the verifier with its
    paired interval and n (what the CLI prints at the end of the run); without that run, no Δ."""
    lone = run_cell("sps", results=tmp_path / "alone", pair_dir=small_pair_dir, limit=10)
    assert "score_delta" not in lone
    run_cell("ar", results=tmp_path, pair_dir=small_pair_dir, limit=10)
    summary = run_cell("sps", results=tmp_path, pair_dir=small_pair_dir, limit=10)
    folder = run_dir(cfg_of(*TINY, "method=sps", "limit=10", results=tmp_path, pair_dir=small_pair_dir))
    stored = json.loads((folder / "summary.json").read_text())
    assert stored["score_delta_n"] == 10 and len(stored["score_delta_ci"]) == 2
    assert stored["score_delta"] == summary["score_delta"]


class VirtualClock:
    """The engine's clock, advanced only by model forwards: each costs its model's layers times the machine's
    load (set by the test), so a timing depends on the work done and the load, never on the real machine."""

    def __init__(self):
        self.t, self.load = 0.0, 1.0

    def perf_counter(self) -> float:
        return self.t

    def charge(self, module, args):
        if type(module).__name__.endswith("Model") and hasattr(module, "layers"):  # a model's decoder stack
            self.t += self.load * (1 + len(module.layers))


def test_paired_timing_cancels_a_load_that_changes_between_runs(small_pair_dir, tmp_path, monkeypatch):
    """SpS and Cactus with δ = 0 make the same decisions from the same random numbers. On a clock where the
    machine is three times as loaded during the Cactus run as during the SpS run, their paired speedups are
    still equal (each item's two decodes share the load), while their task-time speedups against one
    verifier-alone run differ threefold (the control: what paired timing is for). This replaces a slow test
    that loaded the real machine and compared measured speedups within 10 %: a verdict on the load."""
    import types

    import torch

    from cactus_bench.core.decode import engine

    clock = VirtualClock()
    monkeypatch.setattr(engine, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    hook = torch.nn.modules.module.register_module_forward_pre_hook(clock.charge)
    try:
        run_cell("ar", results=tmp_path, pair_dir=small_pair_dir, limit=4)
        sps = run_cell("sps", "paired_timing=true", results=tmp_path, pair_dir=small_pair_dir, limit=4)
        clock.load = 3.0
        cactus = run_cell(
            "cactus", "delta=0.0", "paired_timing=true", results=tmp_path, pair_dir=small_pair_dir, limit=4
        )
    finally:
        hook.remove()
    assert clock.t > 0 and sps["accepted_length"] == cactus["accepted_length"]  # the same decisions
    assert sps["paired_speedup_n"] == cactus["paired_speedup_n"] == 4
    assert cactus["paired_speedup"] == pytest.approx(sps["paired_speedup"], rel=1e-12)
    assert cactus["speedup"] == pytest.approx(sps["speedup"] / 3, rel=1e-12)  # unpaired: the load, measured


def test_a_sweep_times_its_cells_methods_together_beside_one_verifier_alone_decode(small_pair_dir, tmp_path):
    """In-process, a sweep's drafting runs time their sample together (`app.together`): each item's records
    in every run hold the same verifier-alone time (one decode), say how many methods shared it, and every
    summary is merged again with the timings, Cactus's speedup over SpS included. A resume times only what a
    run lacks; `timing=apart` times each run beside its own verifier-alone decodes, as before."""
    from cactus_bench.tools.sweep import main

    args = ("sweeps/demo.yaml", "limit=4", "m=2", "max_gen_toks=6", "batch_size=4", "timing_sample=3", "progress=false")
    env = {"CACTUS_BENCH_RESULTS": str(tmp_path / "together")}
    out = run_main(main, *args, *pair_overrides(small_pair_dir), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = tmp_path / "together" / "runs" / "arith" / "small"
    timed = {p.parent.name.split("_")[0]: p for p in runs.glob("*/timing.jsonl")}
    assert sorted(timed) == ["cactus-delta0.02", "cactus-delta0.05", "sps", "tas-epsilon0.09-recoveryargmax"]

    def records(path):
        return {t["index"]: t["stats"] for t in map(json.loads, path.read_text().splitlines())}

    by_run = {name: records(path) for name, path in timed.items()}
    items = set(by_run["sps"])
    assert len(items) == 3 and all(set(r) == items for r in by_run.values())
    for i in items:
        assert len({r[i]["paired_baseline_time"] for r in by_run.values()}) == 1
        assert {r[i]["paired_methods"] for r in by_run.values()} == {4}
    for path in timed.values():
        summary = json.loads((path.parent / "summary.json").read_text())
        assert summary["paired_speedup_n"] == 3 and summary["paired_speedup_vs_sps_n"] == 3, summary

    cactus = timed["cactus-delta0.05"]
    kept = cactus.read_text().splitlines()
    cactus.write_text("\n".join(kept[:2]) + "\n")  # as if stopped before its last item
    before = {name: path.read_text() for name, path in timed.items() if path != cactus}
    assert run_main(main, *args, *pair_overrides(small_pair_dir), env=env).returncode == 0
    assert all(timed[name].read_text() == text for name, text in before.items())
    again = records(cactus)
    assert set(again) == items and [again[i]["paired_methods"] for i in sorted(items)].count(1) == 1

    env = {"CACTUS_BENCH_RESULTS": str(tmp_path / "apart")}
    assert run_main(main, *args, "timing=apart", *pair_overrides(small_pair_dir), env=env).returncode == 0
    apart = [records(p) for p in (tmp_path / "apart" / "runs" / "arith" / "small").glob("*/timing.jsonl")]
    assert len(apart) == 4 and {s["paired_methods"] for r in apart for s in r.values()} == {1}
    assert len({r[i]["paired_baseline_time"] for r in apart for i in r}) == 12  # a decode of its own each


def test_only_runs_of_one_request_items_time_together():
    """A drafting run with a timing sample on lm-eval tasks times in a group; a Spec-Bench run does not (a
    question's second turn follows the method's own first answer, so two methods decode other requests),
    nor the verifier alone, a run with paired_timing (timed as it decodes), or one at batch size 1."""
    from cactus_bench.app.config import validate
    from cactus_bench.app.together import groups_of, times_together

    def spec(*over):
        return validate(cfg_of("pair=tiny", "batch_size=4", "timing_sample=3", *over))

    grouped = [spec("data=arith", "method=sps"), spec("data=arith", "method=cactus"), spec("data=gsm8k", "method=sps")]
    alone = [
        spec("data=specbench", "method=sps"),
        spec("data=arith", "method=ar"),
        spec("data=arith", "method=sps", "paired_timing=true", "batch_size=1"),
        spec("data=arith", "method=sps", "batch_size=1"),
    ]
    assert [times_together(s) for s in grouped + alone] == [True] * 3 + [False] * 4
    groups = groups_of(grouped + alone)
    assert [[s.cfg.data.name for s in g] for g in groups] == [["arith", "arith"], ["gsm8k"]]


def test_a_group_gives_each_method_the_tokens_it_decodes_alone_when_outputs_are_overwritten(small_pair_dir):
    """Timed together, the verifier alone, SpS and Cactus decode each request in turn, each with its own
    decoder: under CUDA graph trees' overwriting of a forward's outputs at the next forward (emulated,
    `graphs.overwritten_outputs`) every one still decodes the tokens it decodes alone."""
    from cactus_bench.app.config import validate
    from cactus_bench.app.run import get_decoder, models_of
    from cactus_bench.app.together import baseline_spec
    from cactus_bench.core.decode import graphs
    from cactus_bench.core.decode.api import PairedGroup, Request, verifier_alone_decoder

    specs = {
        m: validate(cfg_of(*TINY, f"method={m}", "max_gen_toks=12", pair_dir=small_pair_dir)) for m in ("sps", "cactus")
    }
    requests = [Request(f"Tom has {n} apples and buys {n + 3}. How many?", ("arith", n)) for n in range(3)]

    def decoders():
        members = {m: get_decoder(s, batch_size=1, statistics=False) for m, s in specs.items()}
        return members, verifier_alone_decoder(models_of(specs["sps"]), baseline_spec(specs["sps"]))

    members, baseline = decoders()
    alone = {m: [g.output.tokens for g in d.generate(requests)] for m, d in members.items()}
    alone["verifier"] = [g.output.tokens for g in baseline.generate(requests)]
    with graphs.overwritten_outputs():
        members, baseline = decoders()
        group = PairedGroup(members, baseline)
        together = {m: [] for m in members}
        for r in requests:
            for m in members:
                together[m].append(next(group.member(m).generate([r])))
    for m in members:
        assert [g.output.tokens for g in together[m]] == alone[m], m
        assert all(g.paired["paired_baseline_tokens"] == len(t) for g, t in zip(together[m], alone["verifier"]))


def test_a_group_member_whose_decoder_fails_to_load_releases_its_lock_and_is_marked_failed(
    small_pair_dir, tmp_path, monkeypatch
):
    """Two runs time together; the second's decoder refuses to load: both locks are released (a rerun is not
    refused as 'being written'), and the failing run's manifest says failed."""
    from cactus_bench.app import run as run_mod
    from cactus_bench.app import together
    from cactus_bench.app.config import validate
    from cactus_bench.core.decode.api import ModelLoadError

    over = (*TINY, "limit=3", "batch_size=3", "timing_sample=2")
    specs = [validate(cfg_of(*over, f"method={m}", results=tmp_path, pair_dir=small_pair_dir)) for m in ("sps", "tas")]
    for spec in specs:
        run_mod.run(spec, time_sample=False)
    real = together.get_decoder

    def refusing(spec, **changes):
        if spec.method.name == "tas":
            raise ModelLoadError("no memory left for it")
        return real(spec, **changes)

    monkeypatch.setattr(together, "get_decoder", refusing)
    with pytest.raises(ModelLoadError):
        together.time_together(specs)
    for spec in specs:
        assert not (run_dir(spec.cfg) / ".lock").exists()
    failed = json.loads((run_dir(specs[1].cfg) / "manifest.json").read_text())
    assert failed["history"][-1]["status"] == "failed"


def test_a_reader_never_shows_a_summary_older_than_the_timings_it_holds(small_pair_dir, tmp_path):
    """A timing group killed during its summaries' re-merge leaves a summary computed before its run's
    latest timing records: every reader recomputes from the records (and says so), whose speedup differs."""
    from cactus_bench.app import run as run_mod
    from cactus_bench.core import metrics

    cfg = cfg_of(
        *TINY, "method=sps", "limit=3", "batch_size=3", "timing_sample=3", results=tmp_path, pair_dir=small_pair_dir
    )
    run_mod.run(cfg)
    folder = run_dir(cfg)
    (run,) = load_runs(tmp_path)
    assert run.note is None  # a fresh summary is read as it is
    first = json.loads((folder / "timing.jsonl").read_text().splitlines()[0])
    first["stats"]["paired_method_time"] *= 5  # the item timed again, its summary not merged again
    with open(folder / "timing.jsonl", "a") as f:
        f.write(json.dumps(first) + "\n")
    (run,) = load_runs(tmp_path)
    stored = json.loads((folder / "summary.json").read_text())["paired_speedup"]
    fresh = metrics.read("paired_speedup", run.samples).value
    assert run.summary["paired_speedup"] == pytest.approx(fresh.value) and fresh.value < stored
    assert "computed from 3 samples (3 timed)" in run.note and "rerun the same command" in run.note

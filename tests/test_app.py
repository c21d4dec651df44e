"""The Hydra app: config composition, validation, the results store (resume after a crash), reports."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from cactus_bench.app import run as run_mod
from cactus_bench.app.config import ConfigError, validate
from cactus_bench.app.runs import load_runs
from cactus_bench.app.store import RunStore, run_dir
from cactus_bench.benchmarks.task import TaskBenchmark
from cactus_bench.report import figures, load_spec, render_table

from .helpers.configs import cfg_of, pair_overrides
from .helpers.guards import refuse
from .helpers.runs import run_killed_after

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


GROUPS = {
    g: sorted(p.stem for p in (CONF / g).glob("*.yaml"))
    for g in ("pair", "method", "data", "sampling", "tracking", "engine", "experiment")
}


@pytest.mark.parametrize("group,option", [(g, o) for g, opts in GROUPS.items() for o in opts])
def test_every_config_option_composes_and_validates(group, option):
    cfg = cfg_of(f"{group}={option}")
    if (group, option) == ("engine", "vllm") and importlib.util.find_spec("vllm") is None:
        with pytest.raises(ConfigError, match="engine.backend=vllm needs vLLM"):  # without it: how to install it
            validate(cfg)
        return
    validate(cfg)


def test_defaults_follow_the_paper():
    cfg = cfg_of()
    assert (cfg.m, cfg.delta, cfg.pair.drafter, cfg.pair.verifier) == (10, 1.0, "Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B")
    assert (cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.top_k) == (0.6, 0.95, 20)
    assert cfg.method.name == "cactus" and cfg.method.params.delta == 1.0


def test_readme_commands_compose():
    cfg = cfg_of("method=cactus", "delta=0.75", "data=gpqa")
    assert cfg.method.params.delta == 0.75 and cfg.data.name == "gpqa" and validate(cfg).method.rule.delta == 0.75
    cfg = cfg_of("pair=tiny", "method=cactus", "delta=0.75", "data=gsm8k", "limit=3")
    assert cfg.pair.drafter == "embedded:tiny/drafter" and cfg.limit == 3


def test_readmes_index_names_every_page_in_docs_and_only_those():
    """README is one screen; the rest lives in docs/, and the index in README is how a reader finds it."""
    import re

    named = set(re.findall(r"`(docs/[\w.-]+\.md)`", (ROOT / "README.md").read_text()))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert named == pages, (named - pages, pages - named)
    assert len((ROOT / "README.md").read_text().splitlines()) <= 60


def test_validate_resolves_the_run_once():
    """One object out of validation: the method, the identity, the decode and model specs, and what
    `dtype: auto` means on this CPU; the verifier alone names no drafter and no drafter precision."""
    from cactus_bench.app.identity import RunIdentity

    cfg = cfg_of("pair=tiny", "method=cactus", "delta=0.5", "m=3", "pair.drafter_dtype=bfloat16")
    spec = validate(cfg)
    assert spec.identity == RunIdentity.of(cfg) and spec.method.rule.delta == 0.5 and spec.decode.method == spec.method
    assert spec.precision == {"verifier_dtype": "float32", "drafter_dtype": "bfloat16"}
    assert (spec.models.drafter, spec.decode.max_new_tokens, spec.decode.top_k) == (
        cfg.pair.drafter,
        cfg.max_gen_toks,
        cfg.sampling.top_k,
    )
    alone = validate(cfg_of("pair=tiny", "method=ar"))
    assert alone.models.drafter is None and alone.precision == {"verifier_dtype": "float32"}
    assert alone.loading(str.upper).verifier == cfg.pair.verifier.upper()


@pytest.mark.parametrize(
    "spec_path", sorted(p for p in (ROOT / "sweeps").glob("*.yaml") if p.stem != "wandb_delta"), ids=lambda p: p.stem
)
def test_every_sweep_spec_composes_into_valid_runs(spec_path):
    from cactus_bench.report import run_overrides

    spec = load_spec(spec_path)
    assert spec["rows"] and spec["data"] and spec["columns"]
    for data in spec["data"]:
        for row in spec["rows"]:
            cfg = cfg_of(*run_overrides(spec, row, data))
            method = validate(cfg).method
            assert method.name == row["method"] and cfg.m == spec["m"]
            if "delta" in row:
                assert method.rule.delta == row["delta"]


@pytest.mark.parametrize("launcher,target", [("slurm", "SlurmLauncher"), ("local_parallel", "JoblibLauncher")])
def test_cluster_launchers_compose(launcher, target):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith(target)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["delta=-1"], "delta=-1.0 is not valid: the divergence budget must be >= 0"),
        (["m=0"], "m=0 is not valid"),
        (["limit=0"], "limit=0 is not valid"),
        (["sampling.top_p=2"], "sampling.top_p=2.0 is not valid"),
        (["method=topk", "method.params.k=0"], "k must be an integer >= 1"),
        (["method=tas", "method.params.recovery=mode"], "recovery must be one of"),
    ],
)
def test_bad_values_fail_before_any_model_loads(overrides, match, monkeypatch):
    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded a model for a bad config"))
    with pytest.raises(ConfigError, match=match):
        run_mod.run(cfg_of(*overrides))


def test_unknown_group_option_and_bad_type_are_hydra_errors():
    with pytest.raises(ConfigCompositionException, match="method/nope"):
        cfg_of("method=nope")
    with pytest.raises((ConfigCompositionException, ValidationError), match="abc"):
        cfg_of("m=abc")


def test_cli_reports_a_bad_value_clearly():
    out = subprocess.run([sys.executable, "-m", "cactus_bench", "delta=-0.5"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "delta=-0.5 is not valid" in out.stderr


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
    from cactus_bench.score import read_responses, score_responses

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
    answers = [json.loads(x) for x in (run_dir(cfg) / "model_answer.jsonl").read_text().splitlines()]
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


# --- reports from a fixture store ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixture_store(small_pair_dir, tmp_path_factory):
    """A small store with the demo's methods, on the small pair."""
    results = tmp_path_factory.mktemp("store") / "runs"
    spec = load_spec(ROOT / "sweeps" / "demo.yaml")
    for row in spec["rows"]:
        overrides = [
            "pair=tiny",
            "data=arith",
            f"method={row['method']}",
            "m=3",
            "limit=10",  # intervals need intervals.MIN_ITEMS items
            "max_gen_toks=10",
            "paired_timing=true",
            "progress=false",
        ] + ([f"delta={row['delta']}"] if "delta" in row else [])
        run_mod.run(cfg_of(*overrides, results=results, pair_dir=small_pair_dir))
    return results


def test_table_from_a_fixture_store(fixture_store, small_pair_dir, tmp_path):
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 3, "max_gen_toks": 10})
    md, path = render_table(spec, load_runs(fixture_store), tmp_path, pair_overrides(small_pair_dir))
    for row in spec["rows"]:
        assert row["label"] in md
    assert {p.suffix for p in tmp_path.iterdir()} == {".csv", ".md", ".tex"}
    assert "+0%" in md  # SpS's Rej against itself
    sps_row = next(line for line in md.splitlines() if line.startswith("| SpS "))
    assert re.search(r"\d\.\d\d× \[\d\.\d\d, \d\.\d\d\]", sps_row)  # paired speedup [95 % interval]
    assert "speedup (paired)" in md and re.search(r"^\| SpS .*\|\s+10\s+\|$", md, re.M)  # every row: its n items
    assert "no run for" not in md and "no SpS run" not in md


def test_tables_and_figures_match_runs_on_their_full_identity(fixture_store, small_pair_dir, tmp_path):
    """A greedy run beside the sampled ones: each table shows its own setting's numbers, figures never mix
    the two, and a copied run folder (two runs, one identity) is refused by name."""
    import shutil

    from cactus_bench.app.runs import AmbiguousRuns, find_run

    store = tmp_path / "runs"
    shutil.copytree(fixture_store, store)
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 3, "max_gen_toks": 10})
    row = next(r for r in spec["rows"] if r["method"] == "cactus")
    greedy = ["pair=tiny", "data=arith", "method=cactus", f"delta={row['delta']}", "m=3", "limit=2", "max_gen_toks=10"]
    run_mod.run(cfg_of(*greedy, "sampling=greedy", "progress=false", results=store, pair_dir=small_pair_dir))
    runs = load_runs(store)
    from cactus_bench.report import compose_cell

    sampled = find_run(runs, compose_cell(spec, row, "arith", pair_overrides(small_pair_dir)))
    greedy_run = find_run(runs, compose_cell(spec, row, "arith", [*pair_overrides(small_pair_dir), "sampling=greedy"]))
    assert sampled.config["sampling"]["temperature"] == 0.6 and greedy_run.config["sampling"]["temperature"] == 0
    assert greedy_run.summary["target_kl"] == 0.0 and sampled is not greedy_run
    made = figures(runs, tmp_path / "figs")
    fig2 = [n for n in made if n.startswith("fig2_delta_grid_arith")]
    assert len(fig2) == 1  # the sampled setting has a δ grid; the greedy one a single δ, so no grid
    assert len([n for n in made if n.startswith("fig1_tradeoff_arith")]) == 2  # one per setting
    shutil.copytree(sampled.folder, sampled.folder.parent / "copy_of_run")
    with pytest.raises(AmbiguousRuns, match="copy_of_run"):
        find_run(load_runs(store), compose_cell(spec, row, "arith", pair_overrides(small_pair_dir)))


def test_table_puts_the_paper_beside_ours_and_names_missing_references(fixture_store, small_pair_dir, tmp_path):
    spec = load_spec(ROOT / "sweeps" / "table1.yaml", {"pair": "tiny", "data": ["arith"]})
    md, _ = render_table(spec, load_runs(fixture_store), tmp_path, pair_overrides(small_pair_dir))
    assert "ours (paper)" not in md and "| SpS " in md  # another pair's runs: no paper numbers beside them
    spec = load_spec(ROOT / "sweeps" / "table1.yaml")
    md, _ = render_table(spec, load_runs(fixture_store), tmp_path)
    assert "no SpS run" in md and "(91.71)" in md  # no runs for the paper's pair: the paper column stays


def test_figures_from_a_fixture_store(fixture_store, tmp_path):
    made = figures(load_runs(fixture_store), tmp_path)
    names = set(made)
    assert any(n.startswith("fig1_tradeoff_arith") for n in names)
    assert any(n.startswith("fig2_delta_grid_arith") for n in names)
    assert any(n.startswith("fig3_speedup_arith") for n in names)
    for png in made.values():
        assert png.stat().st_size > 1000 and png.with_suffix(".pdf").exists()


def test_notebook_regenerates_the_figures_headless(fixture_store, monkeypatch, tmp_path):
    """Run as `jupyter execute` runs it (in notebooks/): before, it found no sweeps there, drew nothing, exited
    0 and created notebooks/results/. Now paths resolve from the project root, and no runs is an error."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbclient.exceptions import CellExecutionError

    def execute():
        nb = nbformat.read(ROOT / "notebooks" / "figures.ipynb", as_version=4)
        where = {"metadata": {"path": str(ROOT / "notebooks")}}
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources=where).execute()

    monkeypatch.setenv("CACTUS_BENCH_RESULTS", str(fixture_store.parent))  # the notebook reads conf/paths
    execute()
    assert list((fixture_store.parent / "figures").glob("fig1_tradeoff_*.png"))
    assert not (ROOT / "notebooks" / "results").exists()
    monkeypatch.setenv("CACTUS_BENCH_RESULTS", str(tmp_path / "empty"))
    with pytest.raises(CellExecutionError, match="no stored runs under"):
        execute()


def test_gated_dataset_without_credentials_fails_before_models_load(monkeypatch, tmp_path):
    from cactus_bench.app import offline
    from cactus_bench.benchmarks import data as data_mod
    from cactus_bench.benchmarks.data import DataError

    monkeypatch.delenv("CACTUS_BENCH_DATA", raising=False)
    monkeypatch.setattr(offline, "LOCAL_DATA", tmp_path / "no-local-copy")  # else offline reads the local one
    monkeypatch.setattr(data_mod, "_hf_token", lambda: None)
    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded a model before the data check"))
    with pytest.raises(DataError, match="gated"):
        run_mod.run(cfg_of("data=gpqa"))


LM_EVAL_SETTING = (
    "pair=tiny",
    "data=arith",
    "method=cactus",
    "delta=0.75",
    "m=3",
    "max_gen_toks=24",
    "sampling=greedy",
)


def _lm_eval_args(pair_dir) -> str:
    """LM_EVAL_SETTING as lm-eval's model_args."""
    models = f"drafter={pair_dir / 'drafter'},verifier={pair_dir / 'verifier'}"
    return f"{models},pair=tiny,method=cactus,delta=0.75,m=3,max_gen_toks=24,temperature=0,device=cpu"


def _our_replies(pair_dir, folder) -> list[tuple[str, str]]:
    """Each item's prompt hash and reply (thinking removed, as the adapter hands lm-eval) from our own run."""
    from cactus_bench.benchmarks.filters import remove_thinking

    run_mod.run(cfg_of(*LM_EVAL_SETTING, "limit=4", "progress=false", results=folder, pair_dir=pair_dir))
    (run,) = load_runs(folder)
    want = [(s["prompt_sha256"], remove_thinking(s["response"])) for s in sorted(run.samples, key=lambda s: s["index"])]
    assert len(set(want)) == 4  # four different prompts and replies: a mix-up shows
    return want


def _lm_eval_replies(samples: list[dict]) -> list[tuple[str, str]]:
    """The same from lm-eval's samples: in memory (argument tuples) or as its log writes them (a dict)."""
    import hashlib

    def prompt(args):
        return args[0][0] if isinstance(args, list) else args["gen_args_0"]["arg_0"]

    return [
        (hashlib.sha256(prompt(s["arguments"]).encode()).hexdigest(), s["resps"][0][0])
        for s in sorted(samples, key=lambda s: s["doc_id"])
        if s["filter"] == "strict-match"  # lm-eval logs each item once per filter
    ]


def test_lm_eval_python_api_decodes_as_our_run_does(small_pair_dir, tmp_path):
    """lm-eval's Python API (`simple_evaluate(model="cactus", model_args=...)` builds the model with
    `create_from_arg_string`) composes the run's config as the CLI does and decodes every item as our own run
    does: greedy, so each item's prompt and reply must agree. Before, lm-eval's scores were never compared."""
    import lm_eval

    from cactus_bench.app.lm_eval import CactusLM, task_manager

    want = _our_replies(small_pair_dir, tmp_path / "runs")
    lm = CactusLM.create_from_arg_string(_lm_eval_args(small_pair_dir))
    py = lm_eval.simple_evaluate(
        model=lm,
        tasks=["cactus_arith"],
        limit=4,
        task_manager=task_manager(),
        apply_chat_template=True,
        log_samples=True,
    )
    assert _lm_eval_replies(py["samples"]["cactus_arith"]) == want
    assert len(lm.records) == 4 and all(r["drafted"] > 0 and r["new_tokens"] <= 24 for r in lm.records)
    with pytest.raises(ValueError, match="need pair=<name> or verifier="):
        CactusLM.create_from_arg_string(f"drafter={small_pair_dir / 'drafter'}")


@pytest.mark.slow
def test_lm_eval_cli_decodes_as_our_run_does(small_pair_dir, tmp_path):
    """lm-eval's CLI as README shows it: `create_from_arg_obj` (a TypeError before), its default
    `--device cuda:0` on a CPU machine, and the project's tasks found without --include_path."""
    want = _our_replies(small_pair_dir, tmp_path / "runs")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cactus_bench.lm_eval_cli",
            "run",
            "--model",
            "cactus",
            "--model_args",
            _lm_eval_args(small_pair_dir).replace(",device=cpu", ""),
            "--tasks",
            "cactus_arith",
            "--limit",
            "4",
            "--apply_chat_template",
            "--log_samples",
            "--output_path",
            str(tmp_path / "lm_eval"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (log,) = (tmp_path / "lm_eval").rglob("samples_cactus_arith_*.jsonl")
    assert _lm_eval_replies([json.loads(line) for line in log.read_text().splitlines()]) == want


def test_figure_1_draws_each_methods_paired_difference_from_the_verifier(fixture_store, tmp_path, monkeypatch):
    """Beside score vs AL, Figure 1 plots each method's Δ score vs the verifier alone with its paired 95 %
    interval: the values `intervals.paired_difference` gives for the same runs (per-item scores set apart per
    method here: the small pair scores 0 on every item)."""
    import random

    from cactus_bench import intervals
    from cactus_bench.app.runs import Run
    from cactus_bench.report import figures
    from cactus_bench.report.figures import common

    drawn = {}
    real = common.Sink.save

    def save(self, fig, name):
        if name.startswith("fig1_tradeoff"):
            drawn["points"] = [
                (float(c.lines[0].get_ydata()[0]), *(float(v) for v in c.lines[2][0].get_segments()[0][:, 1]))
                for c in fig.axes[1].containers
            ]
            drawn["titles"] = [ax.get_title() for ax in fig.axes]
        real(self, fig, name)

    monkeypatch.setattr(common.Sink, "save", save)
    rng = random.Random(0)
    runs = [
        Run(r.folder, r.config, r.summary, [{**x, "score": 100.0 * (rng.random() < 0.6)} for x in r.samples])
        for r in load_runs(fixture_store)
    ]
    figures(runs, tmp_path)
    assert len(drawn["points"]) == 4 and "n = 10 items" in drawn["titles"][1]
    ver = next(r for r in runs if r.is_baseline)
    want = sorted(
        (e.value, e.low, e.high)
        for e in (intervals.paired_difference(r.samples, ver.samples) for r in runs if not r.is_baseline)
    )
    assert [pytest.approx(p) for p in sorted(drawn["points"])] == want
    assert len({w[0] for w in want}) > 1  # the methods' differences are not all alike


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


def test_a_table_of_another_setting_is_named_and_titled_after_it(fixture_store, small_pair_dir, tmp_path):
    """`report table` wrote results/tables/<spec>.* whatever the overrides (an override run overwrote the
    demo table) under the spec's title, with the paper's numbers beside another pair's."""
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 3, "max_gen_toks": 10})
    md, path = render_table(spec, load_runs(fixture_store), tmp_path, pair_overrides(small_pair_dir))
    assert path.name.startswith("demo-m-3_max-gen-toks-10_pair.drafter-") and path.name != "demo.md"
    assert md.splitlines()[0].startswith("## Demo: embedded tiny pair") and "— run with m=3, max_gen_toks=10" in md
    plain = load_spec(ROOT / "sweeps" / "demo.yaml")
    from cactus_bench.report.tables import table_name, table_title

    assert table_name(plain) == "demo" and table_title(plain) == plain["title"]  # the spec's own setting
    table1 = load_spec(ROOT / "sweeps" / "table1.yaml", {"pair": "tiny"})
    md, _ = render_table(table1, [], tmp_path)
    assert "(91.71)" not in md and "pair tiny, not the paper's qwen3_0.6b_14b" in md  # no paper beside tiny
    assert "(91.71)" in render_table(load_spec(ROOT / "sweeps" / "table1.yaml"), [], tmp_path)[0]  # control


@pytest.mark.slow  # draws every figure of two settings: ~30 s
def test_figures_of_several_settings_say_how_they_differ_and_stale_ones_go(fixture_store, tmp_path, monkeypatch):
    """Figures of two settings shared a title and differed by a hash suffix, without n, and nothing said which
    hash was which setting: titles say how the settings differ and index.md maps every file to its title. A
    figure whose runs are gone is removed on the next drawing; figures another command drew with other
    overrides, and files not ours, stay (`make figures` deleted them)."""
    import importlib
    import json
    import shutil

    import yaml

    figures_mod = importlib.import_module("cactus_bench.report.figures")  # the package, not its function
    store = tmp_path / "runs"
    shutil.copytree(fixture_store, store)
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "mine.txt").write_text("not ours")
    copies = []
    for run in load_runs(store):  # every run again as a second setting: greedy
        config = yaml.safe_load((run.folder / "config.yaml").read_text())
        config["sampling"].update(temperature=0.0, top_k=0, top_p=1.0)
        copies.append(run.folder.parent / (run.folder.name + "-greedy"))
        shutil.copytree(run.folder, copies[-1])
        (copies[-1] / "config.yaml").write_text(yaml.safe_dump(config))
    titles = []
    real = dict(figures_mod.GROUP_FAMILIES)
    for family, draw in real.items():
        monkeypatch.setitem(
            figures_mod.GROUP_FAMILIES,
            family,
            lambda sink, name, title, g, v, draw=draw: (titles.append(title), draw(sink, name, title, g, v)),
        )
    made = figures(load_runs(store), figs)
    assert {t.split("; n=")[0] for t in titles} == {
        "arith (small, m=3, temperature=0.0, top_k=0, top_p=1.0",
        "arith (small, m=3, temperature=0.6, top_k=20, top_p=0.95",
    }
    assert all(re.search(r"; n=\d+\)$", t) for t in titles), titles
    index = (figs / "index.md").read_text()
    for name in made:  # a hashed name is found with the setting it draws
        assert re.search(rf"\| {re.escape(name)}\.png \| arith \(small, m=3, temperature=", index), name
    other = json.loads((figs / "index.json").read_text())
    other["figure4_arith"] = {"title": "Figure 4", "scope": ["pair=tiny"], "files": ["figure4_arith.png"]}
    (figs / "index.json").write_text(json.dumps(other))
    (figs / "figure4_arith.png").write_bytes(b"drawn by report figures pair=tiny")
    for copy in copies:  # the greedy runs are gone: their figures go on the next drawing
        shutil.rmtree(copy)
    again = figures(load_runs(store), figs)
    gone = set(made) - set(again)
    assert gone and not any((figs / f"{name}.png").exists() for name in gone)
    assert all((figs / f"{name}.png").exists() for name in again)
    assert (figs / "mine.txt").exists() and (figs / "figure4_arith.png").exists()  # not ours; another scope's


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

"""Slow end-to-end checks of the README's promises, run in CI after the fast suite (`make test-slow`).

They build the real embedded pair once (a few minutes) into a session cache and drive the commands a
user types."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cactus_bench.app.runs import find_run, load_runs
from cactus_bench.tools.report import compose_cell, load_spec

ROOT = Path(__file__).resolve().parents[1]
# one worker for the file: its tests share the module's cache and results (the demo's runs feed its figures)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slow-end-to-end")]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cache = os.environ.get("CACTUS_BENCH_CACHE") or str(tmp_path_factory.mktemp("cache"))
    results = tmp_path_factory.mktemp("results")
    return {**os.environ, "CACTUS_BENCH_CACHE": cache, "CACTUS_BENCH_RESULTS": str(results)}, results


def run(cmd, env, timeout=900):
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def test_readme_one_run_writes_a_complete_run_and_reuses_the_cache(env):
    """README's offline example as written, with the hub unreachable and nothing set: it goes offline at once
    and reads the local copy of the data beside the checkout (before: half a minute of retries, then a
    request for data.root)."""
    env, results = env
    env = {k: v for k, v in env.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "CACTUS_BENCH_DATA")}
    env["HF_ENDPOINT"] = "https://127.0.0.1:9"  # the hub unreachable: a refused connection, at once
    cmd = [
        sys.executable,
        "-m",
        "cactus_bench",
        "pair=tiny",
        "method=cactus",
        "delta=0.75",
        "data=gsm8k",
        "limit=3",
    ]
    first = run(cmd, env, timeout=1200)  # builds the embedded pair on first use
    said = first.stdout + first.stderr
    assert "running offline" in said and "reading the benchmark files from" in said
    summary = next(results.glob("runs/gsm8k/tiny/cactus-delta0.75_m10_*/summary.json"))
    s = json.loads(summary.read_text())
    assert s["samples"] == 3 and "score" in s and s["accepted_length"] is not None
    assert json.loads((summary.parent / "manifest.json").read_text())["status"] == "complete"
    for folder in results.glob("runs/gsm8k/tiny/cactus-delta0.75_m10_*"):
        import shutil

        shutil.rmtree(folder)  # decode again, with the pair in the cache
    again = run(cmd, env)
    assert "training the verifier" not in again.stdout + again.stderr  # the cached pair is reused


def test_embedded_pair_meets_its_quality_bar(env):
    env, _ = env
    out = run([sys.executable, "-m", "cactus_bench.adapters.embedded"], env, timeout=1200)
    folder = next(Path(line) for line in out.stdout.splitlines() if Path(line).is_dir())  # the pair's folder
    q = json.loads((folder / "quality.json").read_text())
    assert 0.6 <= q["verifier_accuracy"] <= 0.9 and q["drafter_accuracy"] < q["verifier_accuracy"] - 0.2
    assert q["sps_acceptance"] >= 0.5
    slips = q["slip_probability"]  # the design of arith.py, as the trained models realise it at T = 0.6
    assert slips["drafter"]["carry"]["mean"] > 0.8  # the drafter drops carries
    assert 0.09 < slips["verifier"]["carry"]["mean"] < 0.3  # the verifier rarely does, but above TAS's threshold
    assert abs(slips["drafter"]["borrow"]["mean"] - slips["verifier"]["borrow"]["mean"]) < 0.1  # shared


def test_reproduce_table2_on_the_tiny_pair(env):
    """README's command as written, the hub unreachable and no data folder set (before: it failed on a
    Spec-Bench download unless OFFLINE=1)."""
    env, results = env
    env = {k: v for k, v in env.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "CACTUS_BENCH_DATA")}
    env["HF_ENDPOINT"] = "https://127.0.0.1:9"
    out = run(["make", "reproduce-table2", "PAIR=tiny", "LIMIT=2", "MAX_GEN_TOKS=32"], env)
    # the tiny pair's table: named and titled after its setting, no paper numbers beside it (they are the
    # paper's pair's), and the spec's own table2.md untouched
    assert "Table 2" in out.stdout and "run with pair tiny, not the paper's" in out.stdout and "mt_bench" in out.stdout
    assert "(1.81×†)" not in out.stdout
    assert (results / "tables" / "table2-pair-tiny_limit-2_max-gen-toks-32.md").exists()
    assert not (results / "tables" / "table2.md").exists()


@pytest.fixture(scope="module")
def demo(env, tmp_path_factory):
    """The demo as `make demo` runs it (its sweep, timing sample and all), once for the tests that read it:
    (its output, its results folder, the environment it ran in)."""
    env, _ = env
    results = tmp_path_factory.mktemp("demo")
    here = {**env, "CACTUS_BENCH_RESULTS": str(results)}
    out = run(
        [sys.executable, "-m", "cactus_bench.tools.sweep", "sweeps/demo.yaml", "progress=false"], here, timeout=1200
    )
    return out, results, here


def test_demo_shows_the_accuracy_acceptance_trade_off(demo):
    """The demo reproduces the paper's qualitative claims on the embedded task, each with its paired 95 %
    interval against the verifier alone (docs/statistics.md): SpS's difference is consistent with 0; TAS
    accepts more but scores lower (its interval lies below 0); Cactus accepts more than SpS and its
    difference is consistent with 0; larger δ accepts more and strays further (target KL). And the paper's
    cost regime: a drafter step at most 0.15 of a verifier step (c), SpS at least 1.3× the verifier alone with
    its interval above 1, Cactus more tokens a round than SpS, never measurably slower, and faster at the
    largest δ (their paired ratio); every speedup with its interval and the cost model's prediction inside it."""
    from cactus_bench.core import intervals

    out, results, env = demo
    spec = load_spec(ROOT / "sweeps" / "demo.yaml")
    runs = load_runs(results / "runs")
    found = {row["label"]: find_run(runs, compose_cell(spec, row, "arith")) for row in spec["rows"]}
    by_label = {label: r.summary for label, r in found.items()}
    delta = {
        label: intervals.paired_difference(r.samples, found["Verifier"].samples)
        for label, r in found.items()
        if label != "Verifier"
    }
    ver, sps, tas = by_label["Verifier"], by_label["SpS"], by_label["TAS"]
    cactus = sorted((row["delta"], by_label[row["label"]]) for row in spec["rows"] if row["method"] == "cactus")
    assert 75 <= ver["score"] <= 90, ver["score"]
    assert delta["SpS"].low <= 0 <= delta["SpS"].high, delta["SpS"]
    assert tas["accepted_length"] == max(s["accepted_length"] for label, s in by_label.items() if label != "Verifier")
    assert delta["TAS"].high < 0, delta["TAS"]
    # the paper's cost regime (a drafter step at most 0.15 of a verifier step), and what it buys: SpS faster
    # than the verifier alone beyond its interval
    assert sps["paired_speedup"] >= 1.3 and sps["paired_speedup_ci"][0] > 1, (
        sps["paired_speedup"],
        sps["paired_speedup_ci"],
    )
    for row in spec["rows"]:
        if row["method"] == "cactus":
            c, d = by_label[row["label"]], delta[row["label"]]
            assert c["accepted_length"] > sps["accepted_length"], row["label"]
            assert d.low <= 0 <= d.high, (row["label"], d)
            # never measurably slower than SpS (each timed item's two decodes share one verifier-alone decode)
            assert c["paired_speedup_vs_sps_ci"][1] > 1, (row["label"], c["paired_speedup_vs_sps_ci"])
            assert c["tau"] > sps["tau"], row["label"]
    assert len(cactus) >= 2
    # faster than SpS at the demo's largest δ: its paired ratio over SpS above 1 (six runs here: 1.05-1.10;
    # at the smallest δ 1.01-1.08, within this machine's noise of 1, so only its interval is held above)
    largest = cactus[-1][1]
    assert largest["paired_speedup_vs_sps"] > 1 and largest["paired_speedup"] > sps["paired_speedup"], largest
    for (_, small), (_, large) in zip(cactus, cactus[1:]):
        assert large["accepted_length"] > small["accepted_length"]
        assert large["target_kl"] > small["target_kl"]
    for label, s in by_label.items():  # paired timing is on: every method's speedup has its interval
        if label != "Verifier":
            low, high = s["paired_speedup_ci"]
            assert low <= s["paired_speedup"] <= high
            # the cost model: its prediction (the timed items' step costs, the run's acceptance) lies inside
            # the measured speedup's interval, and it names what a draft costs
            assert low <= s["predicted_speedup"] <= high, (label, s["predicted_speedup"], low, high)
            assert 0 < s["cost_ratio"] <= 0.15 and 0 < s["outside_share"] < 1, (label, s["cost_ratio"])
    table = (results / "tables" / "demo.md").read_text()  # every column; the terminal shows README's few
    assert "speedup (paired, ratio of totals)" in table and "speedup (paired, mean of items)" in table
    assert "speedup vs SpS (paired)" in table and "speedup (predicted, cost model)" in table
    assert " ± " in table and " [" in table and "Δ score vs verifier" in table
    printed = out.stdout[out.stdout.index("## Demo") :]
    assert "speedup (paired, ratio of totals)" in printed and "τ" not in printed.split("\n\n")[1]
    wide = [line for line in out.stdout.splitlines() if len(line) > 120]
    assert not wide, wide  # the terminal's table, its notes and every line around it fit 120 columns
    fig = run([sys.executable, "-m", "cactus_bench.tools.report", "figures", f"out={results / 'figures'}"], env)
    assert "fig1_tradeoff_arith_tiny" in fig.stdout and "fig3_speedup_arith_tiny" in fig.stdout
    assert "positions_arith_tiny" in fig.stdout


def test_a_wheel_install_finds_its_configs(tmp_path):
    """`pip install .` (not editable) ships conf/ inside the package: a run composes from anywhere; and the
    embedded pair whole, with its per-class build records."""
    source, target = tmp_path / "src", tmp_path / "site"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True
    )
    for name in listed.stdout.decode().split():  # a copy of the tree: the build writes build/ where it runs
        path = ROOT / name
        if path.is_file() and not path.is_symlink():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes(path.read_bytes())
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target)]
    subprocess.run([*pip, str(source)], check=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = (
        "import cactus_bench, sys; assert cactus_bench.__file__.startswith(sys.argv[1]), cactus_bench.__file__\n"
        "from cactus_bench.app.config import dataset_configs; assert 'gpqa_diamond' in dataset_configs()\n"
        "from cactus_bench.adapters.embedded import shipped\n"
        "assert shipped.class_builds()[shipped.built_on()]['files'] == shipped.build_hashes(shipped.FOLDER)"
    )
    subprocess.run([sys.executable, "-c", code, str(target)], check=True, cwd=tmp_path, env=env)
    out = subprocess.run(
        [sys.executable, "-m", "cactus_bench", "delta=-1"], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert out.returncode == 2 and "delta=-1.0 is not valid" in out.stderr  # composed from the wheel's conf/


def test_the_local_launcher_runs_two_shards_at_once(env):
    """`hydra/launcher=local_gpus` with two slots: every demo cell x 2 shards as one multirun, two processes
    at a time, every run merged and complete."""
    env, results = env
    env = {**env, "CACTUS_BENCH_GPUS": "2", "TMPDIR": str(results)}  # the slot lock files are this test's own
    cmd = [
        sys.executable,
        "-m",
        "cactus_bench.tools.sweep",
        "sweeps/demo.yaml",
        "limit=4",
        "max_gen_toks=8",
        "seed=7",
        "shards=2",
        "hydra/launcher=local_gpus",
        "progress=false",
    ]
    out = run(cmd, env, timeout=1200)
    assert "Demo" in out.stdout and "no run for" not in out.stdout
    folders = [p for p in results.glob("runs/arith/tiny/*_s7_*")]
    assert len(folders) == 5 and all((p / "summary.json").exists() for p in folders)
    history = [
        h for p in folders for m in p.glob("manifest.shard-*-of-2.json") for h in json.loads(m.read_text())["history"]
    ]
    assert len(history) == 10
    # A worker holds its GPU slot's lock for its whole life and takes the first free slot, so a run on GPU 1
    # means another live worker held GPU 0's slot then: two processes at once. (Comparing decode times instead
    # is flaky: a tiny run's decode is a fraction of a second between seconds of start-up.)
    by_gpu = {h["cuda_visible_devices"]: h["pid"] for h in history}
    assert set(by_gpu) == {"0", "1"} and by_gpu["0"] != by_gpu["1"], history


def readme_command(prefix: str) -> list[str]:
    """The first command in the documentation's code blocks (README, then docs/) that starts with `prefix`,
    joined over its `\\` lines and without its comment, as a user would paste it."""
    import shlex

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n".join(p.read_text() for p in pages).replace(" \\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith(prefix))
    return shlex.split(line.split("  #")[0])


def test_readmes_lm_eval_command_runs_as_written(env):
    env, results = env
    cmd = readme_command("python -m cactus_bench.app.lm_eval_cli run")
    out = run([sys.executable, *cmd[1:], "--output_path", str(results / "lm_eval")], env, timeout=1200)
    assert "cactus_arith" in out.stdout and "exact_match" in out.stdout


def deterministic_columns(markdown: str) -> list[str]:
    """A printed table's rows without its timed columns (speedups, the cost model: machine-dependent by nature)."""
    from cactus_bench.core import metrics

    labels = [m.label for m in metrics.METRICS.values() if m.timed]
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    # a terminal's header cuts a label before its parenthesis and keys it ("speedup [2]"), a note names it whole
    keyed = dict(re.findall(r"^- (\[\d+\]) (.+)$", markdown, flags=re.M))
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    whole = [keyed.get(name.rsplit(" ", 1)[-1], name) for name in header]
    timed = [i for i, name in enumerate(whole) if any(name.endswith(label) for label in labels)]
    assert timed, header  # the timed columns were found: else the comparison below would hold them too
    keep = lambda row: [c.strip() for i, c in enumerate(row.strip("|").split("|")) if i not in timed]  # noqa: E731
    return [" | ".join(keep(row)) for row in rows]


def test_the_demo_prints_the_same_numbers_under_every_cpu_kernel_level(demo, tmp_path):
    """The demo's deterministic columns (scores, Δ, AL, τ, Rej, acceptance, KLs, n) and every one of its 1,000
    replies are the same whichever kernels torch and MKL run: the demo as run on this CPU's widest kernels
    (AVX-512 where it has them), decoded again on ATen's default (scalar) kernels with MKL's COMPATIBLE
    branch. Only the timed column may differ (it is not decoded again here)."""
    wide, wide_results, env = demo
    narrow_results = tmp_path / "narrow"
    narrow_env = {**env, "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
    narrow_env["CACTUS_BENCH_RESULTS"] = str(narrow_results)
    narrow = run(
        [sys.executable, "-m", "cactus_bench.tools.sweep", "sweeps/demo.yaml", "timing_sample=null"], narrow_env
    )

    def tokens(results):
        return {
            (p.parent.name, json.loads(line)["index"]): json.loads(line)["tokens"]
            for p in sorted(results.glob("runs/*/*/*/samples.jsonl"))
            for line in p.read_text().splitlines()
        }

    assert len(tokens(wide_results)) == 1000 and tokens(wide_results) == tokens(narrow_results)
    tables = [deterministic_columns(o.stdout[o.stdout.index("| label") :]) for o in (wide, narrow)]
    assert len(tables[0]) == 7 and tables[0] == tables[1], "\n".join(tables[0] + tables[1])

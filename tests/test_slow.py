"""Slow end-to-end checks of the README's promises, run in CI after the fast suite (`make test-slow`).

They build the real embedded pair once (a few minutes) into a session cache and drive the commands a
user types."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


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
    env, results = env
    cmd = [
        sys.executable,
        "-m",
        "cactus_bench",
        "pair=tiny",
        "method=cactus",
        "delta=0.75",
        "data=gsm8k",
        "limit=3",
        "max_gen_toks=32",
        "progress=false",
    ]
    run(cmd, env, timeout=1200)  # builds the embedded pair on first use
    summary = next(results.glob("runs/gsm8k/tiny/cactus-delta0.75_m10_*/summary.json"))
    s = json.loads(summary.read_text())
    assert s["samples"] == 3 and "score" in s and s["accepted_length"] is not None
    assert json.loads((summary.parent / "manifest.json").read_text())["status"] == "complete"
    again = run(cmd, env)
    assert "training the verifier" not in again.stdout + again.stderr  # the cached pair is reused


def test_embedded_pair_meets_its_quality_bar(env):
    env, _ = env
    out = run([sys.executable, "-m", "cactus_bench.embedded"], env, timeout=1200)
    folder = Path(out.stdout.strip().splitlines()[-2])
    q = json.loads((folder / "quality.json").read_text())
    assert q["verifier_accuracy"] >= 0.6 and q["drafter_accuracy"] < q["verifier_accuracy"] - 0.2
    assert q["sps_acceptance"] >= 0.5 and q["build_seconds"] < 600


def test_reproduce_table2_on_the_tiny_pair(env):
    env, results = env
    out = run(["make", "reproduce-table2", "PAIR=tiny", "LIMIT=2", "MAX_GEN_TOKS=16", "ARGS=progress=false"], env)
    assert "Table 2" in out.stdout and "(1.81×)" in out.stdout and "mt_bench" in out.stdout
    assert (results / "tables" / "table2.md").exists()


def test_demo_sweep_prints_the_method_table(env):
    env, results = env
    out = run([sys.executable, "-m", "cactus_bench.sweep", "sweeps/demo.yaml", "progress=false"], env)
    for label in ("Verifier", "SpS", "TAS", "Cactus δ=0.5", "Cactus δ=1.0"):
        assert label in out.stdout
    fig = run([sys.executable, "-m", "cactus_bench.report", "figures", "--out", str(results / "figures")], env)
    assert "fig1_tradeoff_arith_tiny" in fig.stdout

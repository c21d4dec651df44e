"""Re-scoring stored replies (score.py): bad files and the wrong dataset are one line each; scores are
named after the whole run folder."""

from pathlib import Path

import pytest

from cactus_bench.adapters.benchmarks.data import DataError
from cactus_bench.app import run as run_mod
from cactus_bench.app.store import run_dir

from ..helpers.cli import score_cli
from ..helpers.configs import cfg_of
from ..helpers.runs import TINY, run_cell

ROOT = Path(__file__).resolve().parents[2]


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
    cfg = cfg_of(*TINY, "method=sps", "limit=1", results=tmp_path / "runs", pair_dir=small_pair_dir)
    run_mod.run(cfg)
    out = score_cli("data=ifeval", f"responses={run_dir(cfg)}")
    assert out.returncode == 2 and "holds a run on arith, not ifeval" in out.stderr


def test_replies_scored_as_another_dataset_are_refused(small_pair_dir, tmp_path):
    """A run's samples name their dataset: copied out of the run folder, they are still refused as GSM8K."""
    from cactus_bench.tools.score import read_responses

    run_cell("sps", results=tmp_path, pair_dir=small_pair_dir, limit=3)
    copied = tmp_path / "replies.jsonl"
    folder = run_dir(cfg_of(*TINY, "method=sps", results=tmp_path, pair_dir=small_pair_dir))
    copied.write_text((folder / "samples.jsonl").read_text())
    with pytest.raises(DataError, match="answers arith, not gsm8k: score it with data=arith"):
        read_responses(copied, "gsm8k")
    assert len(read_responses(copied, "arith")) == 3


def test_scores_are_named_after_the_whole_folder():
    from cactus_bench.tools.score import default_output

    name = default_output(Path("results/runs/gsm8k/tiny/cactus-delta1.0_m10_s0_abc123")).name
    assert name == "cactus-delta1.0_m10_s0_abc123.scores.json"


def test_score_with_no_network_and_no_data_folder_goes_offline_at_once(tmp_path):
    """`score` with no data folder set and the hub unreachable retried the hub for ~28 s, then failed: it now
    goes offline at once and reads ../shared/data beside the checkout, as a run does."""
    import os
    import subprocess
    import sys

    replies = tmp_path / "replies.jsonl"
    replies.write_text('{"id": 0, "response": "#### 72"}\n')
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "CACTUS_BENCH_DATA")
    }
    env["HF_ENDPOINT"] = "https://127.0.0.1:9"  # the hub unreachable: a refused connection, at once
    cmd = [
        sys.executable,
        "-m",
        "cactus_bench.tools.score",
        "data=gsm8k",
        f"responses={replies}",
        f"output={tmp_path / 's.json'}",
    ]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "running offline" in out.stderr and "reading the benchmark files from" in out.stderr
    assert '"scored": 1' in out.stdout.splitlines()[-1]

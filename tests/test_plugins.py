"""Registries that packages outside cactus_bench extend through entry points: `tests/plugin_package` is laid
out as an installed package (its dist-info declares entry points; a Hydra search-path plugin adds its config
files) that adds a decode backend loading no model, an acceptance rule and a metric. The app, the store, the
table and W&B see only the `Decoder` interface and the backend's description."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = Path(__file__).resolve().parent / "plugin_package"
CANNED = [
    "pair=tiny",
    "pair.drafter=canned/drafter",
    "pair.verifier=canned/verifier",
    "pair.name=canned",
    "engine=canned",
]
SETTING = ["data=arith", "m=2", "limit=3", "max_gen_toks=8"]


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


@pytest.mark.slow  # three runs and a table in two fresh processes: ~30 s
def test_a_backend_rule_and_metric_from_an_installed_package_run_the_whole_app(tmp_path):
    env = os.environ | {
        "PYTHONPATH": f"{PLUGIN}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path / "wandb"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    runs = tmp_path / "runs"
    cli = [
        "-m",
        "cactus_bench",
        "-m",
        "method=ar,sps,half_sps",
        *CANNED,
        *SETTING,
        f"paths.runs={runs}",
        f"paths.multirun={tmp_path / 'multirun'}",
        "tracking=wandb",
        "progress=false",
    ]
    out = _run(cli, env)
    assert "Half-SpS" in out.stdout + out.stderr or "half_sps" in out.stdout + out.stderr
    folders = {json.loads((f / "summary.json").read_text())["method"]: f for f in runs.glob("arith/canned/*")}
    assert sorted(folders) == ["ar", "half_sps", "sps"]
    half = json.loads((folders["half_sps"] / "summary.json").read_text())
    manifest = json.loads((folders["half_sps"] / "manifest.json").read_text())
    assert half["samples"] == 3 and manifest["status"] == "complete"
    assert half["drafts_per_call"] == 2.0  # the plugin's metric, in the summary: m drafts a call
    assert half["better"]["drafts_per_call"] == "neither" and half["better"]["accepted_length"] == "higher"
    assert list((folders["half_sps"] / "wandb").glob("offline-run-*/*.wandb"))  # W&B's offline log

    spec = {
        "name": "plugin",
        "title": "plugin",
        "pair": "tiny",
        "m": 2,
        "limit": 3,
        "max_gen_toks": 8,
        "data": ["arith"],
        "rows": [
            {"label": "Verifier", "method": "ar"},
            {"label": "SpS", "method": "sps"},
            {"label": "Half", "method": "half_sps"},
        ],
        "columns": ["score", "accepted_length", "drafts_per_call", "rej"],
    }
    (tmp_path / "plugin.yaml").write_text(yaml.safe_dump(spec))
    _run(
        [
            "-m",
            "cactus_bench.tools.report",
            "table",
            str(tmp_path / "plugin.yaml"),
            f"results={runs}",
            f"out={tmp_path / 'tables'}",
            *CANNED,
        ],
        env,
    )
    (table,) = (tmp_path / "tables").glob("*.md")
    text = table.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| label"))
    half_row = next(line for line in text.splitlines() if line.startswith("| Half "))
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in half_row.split("|")]))
    assert cells["arith drafts/call"] in ("2", "2.00") and cells["arith n"] == "3"  # the plugin's metric and rule

    # control: without the package on the path, the names are unknown, in one paragraph
    bare = os.environ | {"HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cactus_bench",
            *CANNED[:-1],
            "engine.backend=canned",
            *SETTING,
            f"paths.runs={tmp_path / 'bare'}",
        ],
        cwd=ROOT,
        env=bare,
        capture_output=True,
        text=True,
    )
    said = out.stdout + out.stderr
    assert out.returncode != 0 and "engine.backend='canned' is not valid: choose one of hf, vllm" in said


def test_a_task_from_an_installed_package_is_found_and_scored(monkeypatch):
    """A dataset from outside: the plugin's task YAML (entry point group `cactus_bench.tasks`) is found
    beside the project's, its prompts built and its replies scored by lm-eval; without the package, the
    same task is unknown (the control)."""
    from cactus_bench.adapters.benchmarks.data import DataError
    from cactus_bench.adapters.benchmarks.scoring import TaskScorer

    with pytest.raises(DataError, match="unknown lm-eval task 'plug_echo'"):
        TaskScorer("plug_echo", "exact_match,none")
    monkeypatch.syspath_prepend(str(PLUGIN))
    scorer = TaskScorer("plug_echo", "exact_match,none")
    prompts = scorer.prompts()
    assert [p.context for p in prompts] == ["Say cactus:", "Say drafter:"] and prompts[0].until == ["\n"]
    assert scorer.score(0, "cactus") == {"exact_match,none": 1.0}
    assert scorer.score(1, "cactus") == {"exact_match,none": 0.0}

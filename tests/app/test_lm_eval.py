"""lm-eval's model and CLI decode as our run does; a gated dataset fails before models load."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cactus_bench.app import method_configs  # noqa: F401  (the method group Hydra composes)
from cactus_bench.app import run as run_mod
from cactus_bench.app.runs import load_runs

from ..helpers.configs import cfg_of
from ..helpers.guards import refuse

ROOT = Path(__file__).resolve().parents[2]


def test_gated_dataset_without_credentials_fails_before_models_load(monkeypatch, tmp_path):
    from cactus_bench.adapters.benchmarks import data as data_mod
    from cactus_bench.adapters.benchmarks.data import DataError
    from cactus_bench.app import offline

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
    from cactus_bench.adapters.benchmarks.filters import remove_thinking

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
            "cactus_bench.app.lm_eval_cli",
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

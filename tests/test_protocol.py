"""Parity with the authors' protocol (docs/protocol.md and GitHub MANGA-UOFA/Cactus `spec.py`)."""

import hashlib
import importlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cactus_bench.adapters.benchmarks.filters import remove_thinking
from cactus_bench.tools.report import compose_cell, load_spec
from cactus_bench.tools.score import scorer_for

from .helpers.paths import DATA

ROOT = Path(__file__).resolve().parents[1]
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="needs ../shared/data")


def protocol_rows() -> list[tuple[str, str]]:
    """(checked, ours) of every machine-checked row of docs/protocol.md."""
    rows = []
    for line in (ROOT / "docs" / "protocol.md").read_text().splitlines():
        if not line.startswith("| ") or line.startswith("| ---") or line.startswith("| setting"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[1]:
            rows.append((cells[1].strip("`"), cells[2]))
    return rows


def checked_value(check: str):
    kind, _, ref = check.partition(":")
    if kind.startswith("cfg"):
        data, _, method = (kind.partition("@")[2] or "gsm8k/sps").partition("/")
        spec = load_spec(ROOT / "sweeps" / "table1.yaml")
        cfg = compose_cell(spec, {"method": method, **({"delta": 0.75} if method == "cactus" else {})}, data)
        from omegaconf import OmegaConf

        return OmegaConf.select(cfg, ref)
    if kind == "task":
        task, _, key = ref.partition(".")
        config = scorer_for({"cactus_gsm8k": "gsm8k", "cactus_gpqa_diamond": "gpqa"}[task]).task.config
        value = getattr(config, key.split(".")[0])
        for part in key.split(".")[1:]:
            value = value[part] if isinstance(value, dict) else getattr(value, part)
        return value.__name__ if isinstance(value, type) else value
    if kind == "py":
        module, _, name = ref.rpartition(".")
        return getattr(importlib.import_module(module), name)
    raise AssertionError(f"unknown check {check!r}")


@needs_data
@pytest.mark.parametrize("check,ours", protocol_rows(), ids=lambda x: x if x.startswith(("cfg", "task", "py")) else "")
def test_protocol_document_agrees_with_the_code(check, ours):
    literal = re.search(r"`([^`]*)`", ours).group(1).replace("\\|", "|")
    assert checked_value(check) == yaml.safe_load(literal), f"docs/protocol.md says {literal} for {check}"


def test_protocol_document_checks_many_settings():
    assert len(protocol_rows()) >= 20


# A constant is only a name: each `py:` row is also checked by the test of what the constant does.
BEHAVIOUR = {
    "py:cactus_bench.adapters.benchmarks.scoring.FEWSHOT_SEED": "test_gsm8k_exemplars_are_the_authors_draws",
    "py:cactus_bench.adapters.benchmarks.scoring.FEWSHOT_AS_MULTITURN": (
        "test_fewshot_prompts_are_identical_across_processes_and_limits"
    ),
    "py:cactus_bench.adapters.benchmarks.data.GPQA_SHUFFLE_SEED": "test_gpqa_choices_follow_the_authors_lm_eval",
}


def test_every_constant_row_has_a_behaviour_test():
    constants = [check for check, _ in protocol_rows() if check.startswith("py:")]
    assert constants and all(callable(globals().get(BEHAVIOUR.get(c, ""))) for c in constants), constants


@needs_data
def test_gsm8k_exemplars_are_the_authors_draws():
    """The authors' lm-eval (e4a7b69) draws a document's exemplars twice from the seed-1234 generator and uses
    the second draw: document 0 shows train rows 7462, 6610, 4769, 286, 5501. lm-eval 0.4.13's own sampler
    (one draw) shows 6374, 3610, 957, 61, 742: the control."""
    from lm_eval.api import samplers

    def exemplars(scorer):
        scorer.chat_template, scorer.tokenizer_name = (lambda h, add_generation_prompt=True: json.dumps(h)), "plain"
        context = json.loads(scorer.prompts(1)[0].context)[0]["content"]
        train = scorer.task.fewshot_docs()
        found = [(context.index(d["question"]), d["id"]) for d in train if f"Question: {d['question']}\n" in context]
        return [i for _, i in sorted(found)]

    ours = scorer_for("gsm8k", DATA)
    assert ours.task.sampler.__class__.__name__ == "TwiceDrawnSampler"
    assert exemplars(ours) == [7462, 6610, 4769, 286, 5501]
    stock = scorer_for("gsm8k", DATA)
    stock.task.sampler = samplers.ContextSampler(list(stock.task.fewshot_docs()), rnd=1234)
    assert exemplars(stock) == [6374, 3610, 957, 61, 742]


# --- thinking removal (RemoveThinkingToken) ------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,scored",
    [
        ("<think>\nreasoning\n</think>\n\nThe answer is 4.", "The answer is 4."),
        ("<think>budget ran out. The answer is (B)", "budget ran out. The answer is (B)"),  # kept, can score
        ("stray prefix</think>\nfinal", "final"),
        ("a</think>b</think>c", "c"),
        ("<think>x</think>mid<think>y</think>end", "midend"),
        ("no thinking", "no thinking"),
    ],
)
def test_thinking_is_removed_as_the_authors_filter_does(raw, scored):
    assert remove_thinking(raw) == scored


@needs_data
def test_a_reply_cut_off_while_thinking_still_scores():
    """Before: an unclosed <think> became "" and scored 0. The authors' filter keeps the text."""
    scorer = scorer_for("gpqa", DATA)
    prompt = scorer.prompts(limit=1)[0]
    reply = f"<think>\nLet me work it out... so the answer is {prompt.doc['answer']}"
    scores = scorer.score(prompt.index, reply)
    assert scores["exact_match,flexible-extract"] == 1 and scores["exact_match,flexible-extract-last"] == 1
    gsm = scorer_for("gsm8k", DATA)
    p = gsm.prompts(limit=1)[0]
    gold = p.doc["answer"].split("####")[-1].strip()
    assert gsm.score(p.index, f"<think>long</think>\n\nSo #### {gold}")["exact_match,strict-match"] == 1
    assert gsm.score(p.index, f"<think>the answer is #### {gold} but cut off")["exact_match,strict-match"] == 1


# --- few-shot exemplars and layout -----------------------------------------------------------------------


def _render(limit: int) -> list[str]:
    scorer = scorer_for("gsm8k", str(DATA))
    turns = []

    def template(history, add_generation_prompt=True):  # a plain chat template that records the turns
        turns.append(len(history))
        return json.dumps(history)

    scorer.chat_template, scorer.tokenizer_name = template, "plain"
    prompts = scorer.prompts(limit)
    assert set(turns) == {1}  # single turn: exemplars and question in one user message
    return [hashlib.sha256(p.context.encode()).hexdigest() for p in prompts]


@needs_data
def test_fewshot_prompts_are_identical_across_processes_and_limits():
    here = _render(4)
    code = "from tests.test_protocol import _render; print(','.join(_render(2)))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert other.stdout.strip().splitlines()[-1].split(",") == here[:2]  # another process, a smaller limit
    assert _render(4) == here  # a second build in the same process (a resume)


# --- GPQA choices as lm-eval v1.0 shows them -------------------------------------------------------------


@needs_data
def test_gpqa_choices_follow_the_authors_lm_eval():
    """Their pinned task deletes every [...] span and shuffles with Python's random after random.seed(0);
    the order is checked against lm-eval's own process_docs on the same cleaned answers."""
    import csv
    import io
    import random
    import zipfile

    import datasets
    from lm_eval.tasks.gpqa.cot_zeroshot.utils import process_docs

    from cactus_bench.adapters.benchmarks.data import GPQA_PASSWORD, gpqa_answer_text, load_gpqa

    ours = load_gpqa(DATA)["train"]
    with zipfile.ZipFile(DATA / "gpqa" / "dataset.zip") as z:
        rows = list(csv.DictReader(io.StringIO(z.read("dataset/gpqa_diamond.csv", pwd=GPQA_PASSWORD).decode())))
    keys = ["Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3", "Correct Answer"]
    cleaned = [{k: gpqa_answer_text(r[k]) if k in keys else r[k] for k in r} for r in rows]
    state = random.getstate()
    random.seed(0)
    try:
        theirs = process_docs(datasets.Dataset.from_list(cleaned))
    finally:
        random.setstate(state)
    assert ours["answer"] == theirs["answer"]

    def trimmed(column):  # their preprocess runs twice on pre-cleaned text: a trailing space can go
        return [[c.strip() for c in choices] for choices in column]

    assert trimmed(ours["choices"]) == trimmed(theirs["choices"])

    def uncleaned(t):  # today's lm-eval: no [...] deletion
        return (t or " ").strip().replace(" [title]", ". ").replace("  ", " ")

    changed = [r for r in rows if any(uncleaned(r[k]) != gpqa_answer_text(r[k]) for k in keys)]
    in_correct = [r for r in rows if uncleaned(r["Correct Answer"]) != gpqa_answer_text(r["Correct Answer"])]
    assert (len(changed), len(in_correct)) == (12, 9)


# --- speedup and acceptance, named for what they are --------------------------------------------------------


def _sample(item, tokens, seconds, drafted=0, accepted=0, accepted_any=0):
    return {
        "id": item,
        "stats": {
            "new_tokens": tokens,
            "wall_time": seconds,
            "verifier_calls": 1,
            "drafted": drafted,
            "accepted": accepted,
            "accepted_any": accepted_any,
        },
    }


def test_speedup_is_the_task_time_ratio_and_throughput_is_the_second_figure():
    """The paper's speedup is time(verifier alone) / time(method) over the same items, not a tokens/s
    ratio: with different reply lengths the two differ, and only the first is `speedup`."""
    from cactus_bench.core import metrics

    method = [_sample(0, 100, 2.0), _sample(1, 300, 2.0)]  # 400 tokens in 4 s
    base = [_sample(0, 50, 3.0), _sample(1, 150, 3.0), _sample(2, 10, 9.0)]  # item 2: not in the method's run
    assert metrics.speedup(method, base).value == pytest.approx(6.0 / 4.0)
    assert metrics.speedup(method, base).items == 2
    assert metrics.throughput_speedup(method, base) == pytest.approx((400 / 4) / (200 / 6))


def _paired(base_seconds, method_seconds):
    return {"id": 0, "stats": {"paired_baseline_time": base_seconds, "paired_method_time": method_seconds}}


def test_paired_speedup_is_the_ratio_of_summed_times_with_fiellers_interval():
    from cactus_bench.core import metrics

    rng = random.Random(0)
    samples = [_paired(b, b / rng.uniform(1.2, 1.8)) for b in (rng.uniform(0.05, 0.5) for _ in range(200))]
    est = metrics.paired_speedup(samples)
    total = sum(s["stats"]["paired_baseline_time"] for s in samples) / sum(
        s["stats"]["paired_method_time"] for s in samples
    )
    assert est.value == pytest.approx(total) and est.items == 200
    assert 1.2 < est.low < est.value < est.high < 1.8 and est.high - est.low < 0.1
    assert metrics.paired_speedup(samples) == est  # the same samples, the same interval
    wider = metrics.paired_speedup(samples[:20])  # fewer items, a wider interval
    assert wider.high - wider.low > est.high - est.low
    constant = metrics.paired_speedup([_paired(b, b / 2) for b in (0.1, 0.3, 0.2, 0.7, 0.4) * 2])
    assert constant.low == pytest.approx(2.0) and constant.high == pytest.approx(2.0)  # no spread, no width
    few = metrics.paired_speedup(samples[:4])
    assert few.value > 1 and few.low is None and few.items == 4  # below intervals.MIN_ITEMS: no interval
    # items decoded without paired timing are left out, not counted as zero
    assert metrics.paired_speedup([*samples, {"id": 1, "stats": {"wall_time": 9.0}}]) == est
    assert metrics.paired_speedup([{"id": 1, "stats": {"wall_time": 9.0}}]) is None
    summary = metrics.decode_metrics([{**s, "stats": {**s["stats"], "new_tokens": 1}} for s in samples])
    assert summary["paired_speedup"] == est.value and summary["paired_speedup_ci"] == [est.low, est.high]


def test_acceptance_rate_counts_every_position_and_prefix_acceptance_the_prefix():
    from cactus_bench.core import metrics

    s = [_sample(0, 4, 1.0, drafted=10, accepted=3, accepted_any=7)]
    assert metrics.decode_metrics(s)["acceptance_rate"] == pytest.approx(0.7)
    assert metrics.decode_metrics(s)["prefix_acceptance"] == pytest.approx(0.3)


def test_the_kernel_counts_accepts_after_the_first_rejection():
    """Top-k with k = 1: drafts 0 (rejected: not q's top token) then 1, 1 (accepted): prefix 0, any 2."""
    import torch

    from cactus_bench.core.rules import build_rule

    q = torch.tensor([[0.2, 0.8], [0.2, 0.8], [0.2, 0.8], [0.5, 0.5]])[None]
    p = torch.full((1, 3, 2), 0.5)
    v = build_rule("topk", k=1).verify(p, q, torch.tensor([[0, 1, 1]]), torch.Generator().manual_seed(0))
    assert int(v.n_accepted) == 0 and int(v.n_accepted_any) == 2


# --- pairs and published numbers ---------------------------------------------------------------------------


def test_pairs_are_the_checkpoints_the_authors_ran():
    from hydra import compose, initialize_config_dir

    from cactus_bench.app import method_configs  # noqa: F401  (the method group)
    from cactus_bench.app.schema import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        pairs = {
            name: compose("config", overrides=[f"pair={name}"]).pair
            for name in ("qwen3_1.7b_32b", "r1distill_1.5b_7b", "gemma2_2b_9b", "qwen3_0.6b_14b")
        }
    assert pairs["qwen3_1.7b_32b"].verifier == "Qwen/Qwen3-32B-FP8"
    assert pairs["r1distill_1.5b_7b"].drafter == "yongchanghao/DeepSeek-R1-Distill-Qwen-1.5B"
    assert pairs["gemma2_2b_9b"].add_bos_token and not pairs["qwen3_0.6b_14b"].add_bos_token


def test_published_numbers_carry_their_source_and_unverified_ones_are_marked(tmp_path):
    import pandas as pd

    from cactus_bench.tools.report import render_table

    for csv_path in (ROOT / "results" / "paper").glob("*.csv"):
        table = pd.read_csv(csv_path)
        assert {"source", "confidence"} <= set(table.columns) and table["source"].notna().all()
    unverified = pd.read_csv(ROOT / "results" / "paper" / "table2.csv")
    assert set(unverified["confidence"]) == {"unverified"}
    md, _ = render_table(load_spec(ROOT / "sweeps" / "table2.yaml"), [], tmp_path)
    assert "(1.88×†)" in md and "† paper number not traced" in md
    md, _ = render_table(load_spec(ROOT / "sweeps" / "table1.yaml"), [], tmp_path)
    assert "(91.71)" in md and "(91.71†)" not in md and "Rej = r / r_SpS − 1" in md and "docs/protocol.md" in md

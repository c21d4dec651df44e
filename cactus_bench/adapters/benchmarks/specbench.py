"""Spec-Bench wall-time runs: multi-turn conversations with the chat template, answers in Spec-Bench's own
schema and layout (`<model_id>.jsonl`, turns cleaned as its code cleans them, so its `evaluation/speed.py`
and `equal.py` read them unmodified), and its speed metrics against an AR run of the same pair: the
speedup as speed.py computes it (the baseline's tokens re-counted from its text) beside this harness's
(generated ids), each named (docs/protocol.md)."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from cactus_bench.core import metrics
from cactus_bench.core.decode import Request
from cactus_bench.core.metrics.timing_conditions import timing_caveat

if TYPE_CHECKING:
    from cactus_bench.core.decode import Decoder, Generation

MT_BENCH = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
SUBTASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


def subtask(category: str) -> str:
    return "mt_bench" if category in MT_BENCH else category


def one(decoder: Decoder, request: Request) -> Generation:
    return next(iter(decoder.generate([request])))


def cleaned(text: str, special_tokens: Collection[str]) -> str:
    """A reply as Spec-Bench stores a turn: the text of every special token removed, then whitespace
    stripped (idempotent: a cleaned turn cleans to itself)."""
    for token in special_tokens:
        text = text.replace(token, "")
    return text.strip()


def answer_question(
    decoder: Decoder, question: dict, model_id: str, special_tokens: Collection[str] = ()
) -> tuple[dict, list[dict]]:
    """One question, all its turns in one conversation (turn 2 sees the first answer as it was emitted:
    `raw_turns`); timed per turn. Returns the answer in Spec-Bench's schema (its `turns` cleaned as its code
    cleans them) and each turn's decode statistics."""
    messages, raw, steps, new_tokens, wall, accept_lengths, accepted, stats = [], [], [], [], [], [], [], []
    for j, turn in enumerate(question["turns"]):
        messages.append({"role": "user", "content": turn})
        gen = one(decoder, Request(decoder.apply_chat_template(messages), ("specbench", question["question_id"], j)))
        out = gen.output
        messages.append({"role": "assistant", "content": gen.raw_text})
        raw.append(gen.raw_text)
        steps.append(out.verifier_calls)
        new_tokens.append(len(out.tokens))
        wall.append(out.wall_time)
        accept_lengths += out.rounds.emitted  # Spec-Bench: tokens per decoding step, bonus included
        accepted += out.rounds.accepted
        stats.append(gen.stats())
    return {
        "question_id": question["question_id"],
        "category": question["category"],
        "answer_id": uuid.uuid4().hex[:22],  # fresh for every answer, as Spec-Bench's shortuuid
        "model_id": model_id,
        "tstamp": time.time(),
        "choices": [
            {
                "index": 0,
                "turns": [cleaned(t, special_tokens) for t in raw],
                "raw_turns": raw,
                "decoding_steps": steps,
                "new_tokens": new_tokens,
                "wall_time": wall,
                "accept_lengths": accept_lengths,
                "accepted_drafts": accepted,
            }
        ],
    }, stats


def warm_up(decoder: Decoder, question: dict, runs: int) -> None:
    """Spec-Bench warms up on the first question before timing anything."""
    prompt = decoder.apply_chat_template([{"role": "user", "content": question["turns"][0]}])
    for _ in range(runs):
        one(decoder, Request(prompt, ("warmup",)))


TokenCount = Callable[[Sequence[str]], int]  # an answer's turns -> its tokens, as speed.py counts them


SPEEDUPS = ("speedup", "speedup_mean_of_ratios", "speedup_specbench")


def speed_metrics(
    samples: list[dict],
    baseline: list[dict] | None,
    count: TokenCount | None = None,
    names: dict[str, str] | None = None,
) -> dict[str | None, dict]:
    """Per subtask and overall, over stored samples (`answer` in Spec-Bench's schema, `stats`, `category`):
    τ and AL pooled over decoding steps (the metrics' own definitions), tokens/s (Spec-Bench's per-question
    speed, averaged), and against the AR baseline: the ratio of mean speeds over the questions both answered,
    each side's tokens its generated ids (`speedup`), the same as speed.py computes it (`speedup_specbench`,
    given `count`: every answer of each file, the baseline's tokens re-counted from its turns' text), and
    the mean of per-question ratios; with paired timing, the paired speedup (summed times, Fieller's
    interval) too. `names`: each speedup column's name, for its caveat."""

    def speed(sample):
        c = sample["answer"]["choices"][0]
        return sum(c["new_tokens"]) / sum(c["wall_time"])

    def groups_of(rows):
        groups = defaultdict(list)
        for s in rows:
            groups[subtask(s["category"])].append(s)
            groups["overall"].append(s)
        return groups

    base = {s["id"]: s for s in baseline} if baseline else {}
    groups, base_groups = groups_of(samples), groups_of(baseline or [])
    out: dict[str | None, dict] = {}
    for name in [*SUBTASKS, "overall"]:
        group = groups.get(name)
        if not group:
            continue
        pooled = metrics.pool(group)
        row = {
            "questions": len(group),
            "tau": metrics.tau(pooled),
            "accepted_length": metrics.accepted_length(pooled),
            "tokens_per_s": statistics.mean(speed(s) for s in group),
        }
        paired = [s for s in group if s["id"] in base]
        if paired:
            # read as every task-time speedup is (`metrics.timing_caveat`): withheld for batched runs
            task_time = metrics.METRICS.get("speedup")
            caveat = timing_caveat(task_time, paired, [base[s["id"]] for s in paired])
            columns = [c for c in SPEEDUPS if count or c != "speedup_specbench"]
            row |= dict.fromkeys(columns)
            if caveat is not None:  # each column's caveat under its own name
                named = names or {}
                row |= {
                    f"{c}_caveat": (caveat[0], caveat[1].replace(task_time.label, named.get(c, c), 1)) for c in columns
                }
            if caveat is None or not caveat[0]:
                alone = {i: speed(b) for i, b in base.items()}
                row["speedup"] = statistics.mean(speed(s) for s in paired) / statistics.mean(
                    alone[s["id"]] for s in paired
                )
                row["speedup_mean_of_ratios"] = statistics.mean(speed(s) / alone[s["id"]] for s in paired)
                if count:
                    row["speedup_specbench"] = specbench_speedup(group, base_groups.get(name, []), count)
        reading = metrics.read("paired_speedup", group)
        row.update(metrics.flatten("paired_speedup", reading.value))
        if reading.caveat is not None:
            row["paired_speedup_caveat"] = (reading.withheld, reading.caveat)
        out[name] = row
    return out


def specbench_speedup(answers: list[dict], baseline: list[dict], count: TokenCount) -> float | None:
    """Spec-Bench's `speed.py` on two answer files (its documented arithmetic, over every answer of the
    category in each file): the mean over the method's answers of Σ new_tokens / Σ wall_time, over the mean
    over the baseline's answers of its turns' tokens counted by `count` / Σ wall_time."""
    if not answers or not baseline:
        return None

    def choice(sample):
        return sample["answer"]["choices"][0]

    method = statistics.mean(sum(choice(s)["new_tokens"]) / sum(choice(s)["wall_time"]) for s in answers)
    alone = statistics.mean(count(choice(b)["turns"]) / sum(choice(b)["wall_time"]) for b in baseline)
    return method / alone


def specbench_count(tokenizer) -> TokenCount:
    """speed.py's count of an answer's tokens with the verifier's tokenizer: each turn, cleaned as Spec-Bench
    stores it, tokenised as its call does (special tokens added) less one (the BOS it assumes)."""
    from cactus_bench.core.decode.api import special_token_texts

    special = special_token_texts(tokenizer)
    return lambda turns: sum(len(tokenizer(cleaned(t, special)).input_ids) - 1 for t in turns)


@lru_cache(maxsize=8)
def verifier_tokenizer(verifier: str, revision: str | None = None):
    """The tokenizer of a run's verifier (an embedded pair's resolved), loaded once: speed.py's."""
    from transformers import AutoTokenizer

    from cactus_bench.adapters.embedded import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(verifier, log=lambda s: None), revision=revision)


def verifier_count(verifier: str, revision: str | None = None) -> TokenCount:
    """`specbench_count` with the tokenizer of a run's verifier."""
    return specbench_count(verifier_tokenizer(verifier, revision))


def answer_lines(samples: list[dict], model_id: str, special_tokens: Collection[str] = ()) -> str:
    """Spec-Bench's answer file of these samples, in question order: `model_id` its name, every turn
    cleaned (a run stored before turns were cleaned is cleaned here)."""
    lines = []
    for s in sorted(samples, key=lambda s: s["answer"]["question_id"]):
        answer = {**s["answer"], "model_id": model_id}
        choices = [{**c, "turns": [cleaned(t, special_tokens) for t in c["turns"]]} for c in answer["choices"]]
        lines.append(json.dumps({**answer, "choices": choices}))
    return "".join(line + "\n" for line in lines)


def export_meta(samples: list[dict], model_id: str) -> dict:
    """What speed.py cannot see in an answer file: how the answers were timed (batch sizes, threads, load),
    and what that means for the speedup it prints."""
    conditions = [s.get("conditions") or {} for s in samples]
    batch = sorted({c.get("batch_size") for c in conditions if c.get("batch_size") is not None}, key=str)
    loads = [c["load"] for c in conditions if isinstance(c.get("load"), (int, float))]
    caveats = []
    if any(b != 1 for b in batch):
        caveats.append(
            f"decoded at batch size {batch}: speed.py's speedup of a batched run is not the batch-1 speedup the "
            "paper reports (this harness withholds it)"
        )
    return {
        "model_id": model_id,
        "answers": len(samples),
        "batch_size": batch,
        "threads": sorted({c.get("threads") for c in conditions}, key=str),
        "load": {"min": min(loads), "max": max(loads)} if loads else None,
        "caveats": caveats,
    }


class SpecBenchBenchmark:
    """Spec-Bench's questions, every turn of a question in one conversation, warmed up before timing."""

    def __init__(self, data):
        from cactus_bench.adapters.benchmarks.data import (
            load_specbench,  # `datasets` is slow to import; reports need only speed_metrics
        )

        self.questions = load_specbench(data.root)
        self.warmup = data.warmup
        self._warm = False
        self._model_id = ""
        self._special: tuple[str, ...] = ()

    def prepare(self, decoder: Decoder, model_id: str) -> None:
        self._model_id = model_id
        self._special = tuple(getattr(decoder, "special_tokens", ()))

    def items(self, limit: int | None) -> list[dict]:
        return self.questions[:limit] if limit else self.questions

    def key(self, item: dict) -> int:
        return item["question_id"]

    def order(self, item: dict) -> tuple[int, int]:
        return SUBTASKS.index(subtask(item["category"])), sum(len(turn) for turn in item["turns"])

    def decode(self, decoder: Decoder, items: list[dict]) -> Iterator[dict]:
        """Question by question (a second turn needs the first answer)."""
        for item in items:
            if not self._warm:  # once per process, before the first timed question
                warm_up(decoder, self.questions[0], self.warmup)
                self._warm = True
            answer, turns = answer_question(decoder, item, self._model_id, self._special)
            yield {
                "index": item["question_id"],
                "id": item["question_id"],
                "category": item["category"],
                "stats": metrics.add_stats(turns),
                "answer": answer,
                "finished_at": time.time(),
            }

    def summarise(self, samples: list[dict]) -> dict:
        return {"specbench": speed_metrics(samples, None)} if samples else {}

    def artifacts(self, samples: list[dict]) -> dict[str, str]:
        """Spec-Bench's own answer file, `<model_id>.jsonl` (its speed.py and equal.py read it), and what it
        cannot say (`<model_id>.meta.json`)."""
        meta = export_meta(samples, self._model_id)
        return {
            f"{self._model_id}.jsonl": answer_lines(samples, self._model_id, self._special),
            f"{self._model_id}.meta.json": json.dumps(meta, indent=1),
        }

"""Spec-Bench wall-time runs: multi-turn conversations with the chat template, answers in Spec-Bench's own
schema (so its `speed.py` can read them), and its speed metrics against an AR run of the same pair."""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
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


def answer_question(decoder: Decoder, question: dict, model_id: str) -> tuple[dict, list[dict]]:
    """One question, all its turns in one conversation (turn 2 sees the first answer); timed per turn.
    Returns the answer in Spec-Bench's schema and each turn's decode statistics."""
    messages, turns, steps, new_tokens, wall, accept_lengths, accepted, stats = [], [], [], [], [], [], [], []
    for j, turn in enumerate(question["turns"]):
        messages.append({"role": "user", "content": turn})
        gen = one(decoder, Request(decoder.apply_chat_template(messages), ("specbench", question["question_id"], j)))
        out = gen.output
        messages.append({"role": "assistant", "content": gen.raw_text})
        turns.append(gen.raw_text)
        steps.append(out.verifier_calls)
        new_tokens.append(len(out.tokens))
        wall.append(out.wall_time)
        accept_lengths += out.rounds.emitted  # Spec-Bench: tokens per decoding step, bonus included
        accepted += out.rounds.accepted
        stats.append(gen.stats())
    return {
        "question_id": question["question_id"],
        "category": question["category"],
        "answer_id": f"{model_id}-{question['question_id']}",
        "model_id": model_id,
        "tstamp": time.time(),
        "choices": [
            {
                "index": 0,
                "turns": turns,
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


def speed_metrics(samples: list[dict], baseline: list[dict] | None) -> dict[str | None, dict]:
    """Per subtask and overall, over stored samples (`answer` in Spec-Bench's schema, `stats`, `category`):
    τ and AL pooled over decoding steps (the metrics' own definitions), tokens/s (Spec-Bench's per-question
    speed, averaged), and against the AR baseline (same question ids) Spec-Bench's speedup, the ratio of
    mean speeds (`evaluation/speed.py`), plus the mean of per-question ratios for comparison; with paired
    timing, the paired speedup (summed times, Fieller's interval) too."""

    def speed(sample):
        c = sample["answer"]["choices"][0]
        return sum(c["new_tokens"]) / sum(c["wall_time"])

    base = {s["id"]: s for s in baseline} if baseline else {}
    groups = defaultdict(list)
    for s in samples:
        groups[subtask(s["category"])].append(s)
        groups["overall"].append(s)
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
        if paired:  # Spec-Bench's speed.py: mean speed of the method / mean speed of the baseline
            # read as every task-time speedup is (`metrics.timing_caveat`): withheld for batched runs
            caveat = timing_caveat(metrics.METRICS.get("speedup"), paired, [base[s["id"]] for s in paired])
            row["speedup"] = row["speedup_mean_of_ratios"] = None
            if caveat is not None:
                row["speedup_caveat"] = row["speedup_mean_of_ratios_caveat"] = caveat
            if caveat is None or not caveat[0]:
                alone = {i: speed(b) for i, b in base.items()}
                row["speedup"] = statistics.mean(speed(s) for s in paired) / statistics.mean(
                    alone[s["id"]] for s in paired
                )
                row["speedup_mean_of_ratios"] = statistics.mean(speed(s) / alone[s["id"]] for s in paired)
        reading = metrics.read("paired_speedup", group)
        row.update(metrics.flatten("paired_speedup", reading.value))
        if reading.caveat is not None:
            row["paired_speedup_caveat"] = (reading.withheld, reading.caveat)
        out[name] = row
    return out


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

    def prepare(self, decoder: Decoder, model_id: str) -> None:
        self._model_id = model_id

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
            answer, turns = answer_question(decoder, item, self._model_id)
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
        """Spec-Bench's own answer file (its speed.py reads this)."""
        return {"model_answer.jsonl": "".join(json.dumps(s["answer"]) + "\n" for s in samples)}

"""Spec-Bench wall-time runs: multi-turn conversations with the chat template, answers in Spec-Bench's own
schema (so its `speed.py` can read them), and its speed metrics against an AR run of the same pair."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

from .lm import CactusLM

MT_BENCH = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
SUBTASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


def subtask(category: str) -> str:
    return "mt_bench" if category in MT_BENCH else category


def answer_question(lm: CactusLM, question: dict, model_id: str) -> tuple[dict, list[dict]]:
    """One question, all its turns in one conversation (turn 2 sees the first answer); timed per turn.
    Returns the answer in Spec-Bench's schema and each turn's decode statistics."""
    messages, turns, steps, new_tokens, wall, accept_lengths, accepted, stats = [], [], [], [], [], [], [], []
    for j, turn in enumerate(question["turns"]):
        messages.append({"role": "user", "content": turn})
        prompt = lm.apply_chat_template(messages)
        gen = lm.generate(prompt, [], ("specbench", question["question_id"], j))
        out = gen.output
        messages.append({"role": "assistant", "content": gen.raw_text})
        turns.append(gen.raw_text)
        steps.append(out.verifier_calls)
        new_tokens.append(len(out.tokens))
        wall.append(out.wall_time)
        accept_lengths += out.rounds.emitted  # Spec-Bench: tokens per decoding step, bonus included
        accepted += out.rounds.accepted
        stats.append(out.summary())
    return {
        "question_id": question["question_id"], "category": question["category"],
        "answer_id": f"{model_id}-{question['question_id']}", "model_id": model_id, "tstamp": time.time(),
        "choices": [{"index": 0, "turns": turns, "decoding_steps": steps, "new_tokens": new_tokens,
                     "wall_time": wall, "accept_lengths": accept_lengths, "accepted_drafts": accepted}],
    }, stats


def warm_up(lm: CactusLM, question: dict, runs: int) -> None:
    """Spec-Bench warms up on the first question before timing anything."""
    for _ in range(runs):
        lm.generate(lm.apply_chat_template([{"role": "user", "content": question["turns"][0]}]), [], ("warmup",))


def speed_metrics(answers: list[dict], baseline: list[dict] | None) -> dict[str, dict]:
    """Per subtask and overall: τ (mean tokens per step, bonus included), AL (accepted drafts per step),
    tokens/s, and against the AR baseline (same question ids) the speedup as the mean over questions of
    per-question speed ratios, plus the ratio of mean speeds. Tokens are counted from recorded ids."""
    def speed(a):
        c = a["choices"][0]
        return sum(c["new_tokens"]) / sum(c["wall_time"])

    base = {a["question_id"]: speed(a) for a in baseline} if baseline else {}
    groups = defaultdict(list)
    for a in answers:
        groups[subtask(a["category"])].append(a)
        groups["overall"].append(a)
    out = {}
    for name in [*SUBTASKS, "overall"]:
        group = groups.get(name)
        if not group:
            continue
        lengths = [x for a in group for x in a["choices"][0]["accept_lengths"]]
        accepted = [x for a in group for x in a["choices"][0].get("accepted_drafts", [])]
        row = {"questions": len(group), "tau": statistics.mean(lengths),
               "accepted_length": statistics.mean(accepted) if accepted else None,
               "tokens_per_s": statistics.mean(speed(a) for a in group)}
        paired = [a for a in group if a["question_id"] in base]
        if paired:
            row["speedup"] = statistics.mean(speed(a) / base[a["question_id"]] for a in paired)
            row["speedup_of_means"] = (statistics.mean(speed(a) for a in paired)
                                       / statistics.mean(base[a["question_id"]] for a in paired))
        out[name] = row
    return out

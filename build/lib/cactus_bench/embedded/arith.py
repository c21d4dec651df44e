"""`arith`: a synthetic GSM8K-format task — short multi-step word problems with a worked solution and a
final `#### answer` line — generated deterministically by seed, so the offline pair can be trained on it
and scored exactly like GSM8K (strict match on the `####` line).

Difficulty: a start value of 2–40 and 2–3 add/subtract steps with operands 1–19 (never negative).
Questions are terse (short sequences keep CPU training within minutes). A ~1M-parameter verifier solves
most items; a ~0.1M drafter far fewer.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

NAMES = [
    "Tom",
    "Ana",
    "Li",
    "Sam",
    "Mia",
    "Raj",
    "Eva",
    "Ben",
    "Zoe",
    "Omar",
    "Ivy",
    "Kai",
    "Lea",
    "Noah",
    "Sara",
    "Yuki",
]
ITEMS = ["apples", "books", "coins", "cards", "pens", "shells", "stamps", "marbles", "stickers", "cookies"]
ADD = ["buys {n}", "finds {n}", "gets {n}", "wins {n}"]
SUB = ["gives away {n}", "loses {n}", "sells {n}", "uses {n}"]

# Equivalent phrasings, chosen at random per step: like a real model's many valid ways to say the same
# thing, they give the verifier genuine uncertainty (q_n well below 1) where acceptance rules differ.
STEP_FORMS = {
    "+": ["{a} + {b} = {c}.", "{b} + {a} = {c}.", "{a} plus {b} is {c}."],
    "-": ["{a} - {b} = {c}.", "{a} minus {b} is {c}."],
}
FINAL_FORMS = ["", " So the answer is {v}.", " {name} has {v} {item} now."]

# The GSM8K strict-match rule of lm-eval's gsm8k task (filter "strict-match": regex on the `####` line).
STRICT_MATCH = re.compile(r"#### (\-?[0-9\.\,]+)")


@dataclass(frozen=True)
class Item:
    question: str
    answer: str  # worked solution ending in "#### <number>" (GSM8K format)

    @property
    def gold(self) -> str:
        return self.answer.rsplit("#### ", 1)[1].strip()


def make_item(rng: random.Random) -> Item:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    start = value = rng.randint(2, 40)
    clauses, steps = [], []
    for _ in range(rng.randint(2, 3)):
        n = rng.randint(1, 19)
        op = "+" if rng.random() < 0.5 or n > value else "-"
        clauses.append(rng.choice(ADD if op == "+" else SUB).format(n=n))
        new = value + n if op == "+" else value - n
        steps.append(rng.choice(STEP_FORMS[op]).format(a=value, b=n, c=new))
        value = new
    question = f"{name} has {start} {item}, then {', then '.join(clauses)}. How many {item} now?"
    final = rng.choice(FINAL_FORMS).format(v=value, name=name, item=item)
    return Item(question, " ".join(steps) + final + f"\n#### {value}")


def generate(split: str, n: int, seed: int = 0) -> list[Item]:
    """`n` items of `split` ("train" or "test"); deterministic for a given seed. Test questions never
    appear in the training split of the same seed."""
    if split not in ("train", "test"):
        raise ValueError(f"arith split must be 'train' or 'test'; got {split!r}")
    if split == "train":
        rng = random.Random(f"arith-train-{seed}")
        return [make_item(rng) for _ in range(n)]
    held_out = {it.question for it in generate("train", TRAIN_SIZE, seed)}
    rng = random.Random(f"arith-test-{seed}")
    out: list[Item] = []
    while len(out) < n:
        it = make_item(rng)
        if it.question not in held_out:
            held_out.add(it.question)
            out.append(it)
    return out


TRAIN_SIZE = 30_000
TEST_SIZE = 500


def extract_strict(response: str) -> str | None:
    """The number on the first `#### ` line (GSM8K strict match), or None."""
    m = STRICT_MATCH.search(response)
    return m.group(1) if m else None


def strict_match(response: str, gold: str) -> bool:
    return extract_strict(response) == gold

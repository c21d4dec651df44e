"""`arith`: a synthetic GSM8K-format task — two-step word problems on two-digit numbers with a worked
solution and a final `#### answer` line — generated deterministically by seed, so the offline pair can be
trained on it and scored exactly like GSM8K (strict match on the `####` line).

Why the acceptance rules separate here (the paper's accuracy–acceptance trade-off, in miniature)
-----------------------------------------------------------------------------------------------
The answer is decided at a few *critical tokens*: the tens digit of a step whose units carry (47 + 8)
or borrow (52 − 7). Everywhere else (copying numbers, the phrasing of a step) the models hardly err.
Each model is trained on solutions written by a `Writer` whose slips are chosen on purpose
(`embedded/recipes.py` holds the rates; `quality.json` of a built pair records what the models learnt):

- **Carries: the drafter is systematically wrong.** The verifier's writer drops a carry 28 % of the
  time, the drafter's 95 %. At the demo's T = 0.6 the verifier gives the dropped-carry digit q ≈ 0.2
  and the drafter p ≈ 0.95. SpS emits it with probability q (lossless). TAS accepts any draft with
  q above min(0.09, 0.3·e^−H) — 0.09 here — so it takes the drafter's wrong digit almost every time.
  Cactus raises the drafted token only to γ = q + sqrt(2δ·q(1 − q)) (≈ 0.28 at δ = 0.02, 0.33 at
  δ = 0.05) and accepts with γ/p: a cost that grows with δ and stays a fraction of TAS's.
- **Borrows: both models share the verifier's uncertainty.** Both writers drop borrows (at rates set so
  that both models slip about equally often at T = 0.6): this is what keeps the verifier between 60 and
  90 %, and it costs no rule anything, because p ≈ q there.
- **Phrasing: harmless disagreement.** Every step has three equivalent forms; the verifier's writer picks
  them uniformly, the drafter's prefers the first (70 %). SpS rejects many of these drafts; lossy rules
  accept them for free. This is where TAS and Cactus gain accepted length.

The test split has about 0.37 carries and 0.6 borrows per item (`P_CARRY_TEST`, `P_BORROW`; training has
more carries, 0.5, to teach them): TAS loses over ten points, Cactus at small δ stays within the standard
error. The demo's δ is small because the verifier is far from sure at the decisive digit (q ≈ 0.2 on the
wrong one), where δ = 0.75 would raise that digit to ≈ 0.7; the paper's verifiers give wrong decisive
tokens much less mass. The test split's answers are gold (no slips,
uniform phrasing).
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass, field
from typing import Any

NAMES = ["Tom", "Ana", "Li", "Sam", "Mia", "Raj", "Eva", "Ben", "Zoe", "Omar", "Ivy", "Kai", "Lea", "Noah"]
ITEMS = ["apples", "books", "coins", "cards", "pens", "shells", "stamps", "marbles", "stickers", "cookies"]
ADD = ["buys {n}", "finds {n}", "gets {n}", "wins {n}"]
SUB = ["gives away {n}", "loses {n}", "sells {n}", "uses {n}"]

# Equivalent phrasings (a writer chooses one per step): genuine, harmless uncertainty for the verifier.
STEP_FORMS = {
    "+": ["{a} + {b} = {c}.", "{b} + {a} = {c}.", "{a} plus {b} is {c}."],
    "-": ["{a} - {b} = {c}.", "{a} minus {b} is {c}.", "{a} take away {b} is {c}."],
}

STEPS = 2
OPERANDS = range(2, 20)  # small operands: a ~1M-parameter model learns the sums in a few hundred steps
LOW, HIGH = 20, 79  # every true value stays here, so a value off by ten (a slip) still has two digits
P_ADD = 0.5
P_CARRY = 0.55  # of additions whose units carry, in training (≈ 0.50 carries per item): lessons enough
P_CARRY_TEST = 0.4  # in the test split (≈ 0.37 carries per item): TAS loses clearly, Cactus within noise
P_BORROW = 0.8  # of subtractions whose units borrow (≈ 0.6 borrows per item)

# The GSM8K strict-match rule of lm-eval's gsm8k task (filter "strict-match": regex on the `####` line).
STRICT_MATCH = re.compile(r"#### (\-?[0-9\.\,]+)")


def apply(value: int, op: str, n: int) -> int:
    return value + n if op == "+" else value - n


def event_of(value: int, op: str, n: int) -> str:
    """What decides a step's tens digit: "carry" (units overflow), "borrow" (units underflow) or ""."""
    if op == "+":
        return "carry" if value % 10 + n % 10 >= 10 else ""
    return "borrow" if value % 10 < n % 10 else ""


@dataclass(frozen=True)
class Writer:
    """How a solution is written: the chance of dropping a carry or a borrow (the tens digit then comes out
    ten too low or too high, and later steps carry on from the wrong value), and weights over the phrasings."""

    carry_slip: float = 0.0
    borrow_slip: float = 0.0
    step_weights: tuple[float, ...] = (1.0, 1.0, 1.0)

    @classmethod
    def from_dict(cls, d: dict) -> Writer:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**fields)


GOLD = Writer()


@dataclass(frozen=True)
class Problem:
    name: str
    item: str
    start: int
    moves: tuple[tuple[str, int], ...] = field(default=())  # ("+" | "-", operand)

    def question(self, rng: random.Random) -> str:
        verbs = [rng.choice(ADD if op == "+" else SUB).format(n=n) for op, n in self.moves]
        return f"{self.name} has {self.start} {self.item}, {', '.join(verbs)}. How many now?"

    def gold(self) -> int:
        value = self.start
        for op, n in self.moves:
            value = apply(value, op, n)
        return value

    def events(self) -> list[str]:
        """Per step: "carry", "borrow" or "" (no critical digit)."""
        out, value = [], self.start
        for op, n in self.moves:
            out.append(event_of(value, op, n))
            value = apply(value, op, n)
        return out

    def solve(self, writer: Writer, rng: random.Random) -> str:
        """A worked solution in `writer`'s hand, ending in the GSM8K `#### value` line."""
        steps, value = [], self.start
        for (op, n), event in zip(self.moves, self.events()):
            new = apply(value, op, n)
            if event == "carry" and rng.random() < writer.carry_slip:
                new -= 10
            elif event == "borrow" and rng.random() < writer.borrow_slip:
                new += 10
            form = rng.choices(STEP_FORMS[op], weights=writer.step_weights)[0]
            steps.append(form.format(a=value, b=n, c=new))
            value = new
        return " ".join(steps) + f"\n#### {value}"


@dataclass(frozen=True)
class Item:
    question: str
    answer: str  # worked solution ending in "#### <number>" (GSM8K format)
    problem: Problem | None = field(default=None, compare=False, repr=False)

    @property
    def gold(self) -> str:
        return self.answer.rsplit("#### ", 1)[1].strip()


RESULT = re.compile(r"(?:= | is )(\d)\d\.")  # a step's result; group 1 is its tens digit


def critical_digits(item: Item) -> list[tuple[int, str, str, str]]:
    """Per carry or borrow step of a gold answer: (character offset where the result's tens digit begins,
    its space included, the event, the right text there and the text a slip writes), e.g. " 6" / " 5"."""
    if item.problem is None:
        raise ValueError("critical digits need the item's problem (items from `generate` carry it)")
    out = []
    for match, event in zip(RESULT.finditer(item.answer), item.problem.events()):
        if event:
            start, right = match.start(1) - 1, int(match.group(1))  # the space before the digit
            slip = right - 1 if event == "carry" else right + 1
            out.append((start, event, f" {right}", f" {slip}"))
    return out


def _move(rng: random.Random, value: int, p_carry: float) -> tuple[str, int]:
    """One step from `value`, with a carry or borrow at the given rates; the result stays in [LOW, HIGH]."""
    while True:
        op = "+" if rng.random() < P_ADD else "-"
        critical = rng.random() < (p_carry if op == "+" else P_BORROW)
        choices = [
            n for n in OPERANDS if LOW <= apply(value, op, n) <= HIGH and bool(event_of(value, op, n)) == critical
        ]
        if choices:
            return op, rng.choice(choices)


def make_problem(rng: random.Random, p_carry: float = P_CARRY) -> Problem:
    start = value = rng.randint(LOW, HIGH)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    moves = []
    for _ in range(STEPS):
        op, n = _move(rng, value, p_carry)
        moves.append((op, n))
        value = apply(value, op, n)
    return Problem(name, item, start, tuple(moves))


def generate(split: str, n: int, seed: int = 0, writer: Writer = GOLD) -> list[Item]:
    """`n` items of `split` ("train" or "test"), answers in `writer`'s hand (test answers: always gold);
    deterministic for a given seed. Test questions never appear in the training split of the same seed."""
    if split not in ("train", "test"):
        raise ValueError(f"arith split must be 'train' or 'test'; got {split!r}")
    if split == "train":
        rng = random.Random(f"arith-train-{seed}")
        hand = random.Random(f"arith-train-{seed}-{writer}")  # the questions do not depend on the writer
        out = []
        for _ in range(n):
            problem = make_problem(rng)
            out.append(Item(problem.question(rng), problem.solve(writer, hand), problem))
        return out
    held_out = set(train_questions(seed))
    rng = random.Random(f"arith-test-{seed}")
    out = []
    while len(out) < n:
        problem = make_problem(rng, P_CARRY_TEST)
        question = problem.question(rng)
        answer = problem.solve(GOLD, rng)
        if question not in held_out:
            held_out.add(question)
            out.append(Item(question, answer, problem))
    return out


TRAIN_SIZE = 30_000
TEST_SIZE = 500


@functools.lru_cache(maxsize=4)
def train_questions(seed: int) -> frozenset[str]:
    """The training split's questions, which the test split leaves out: drawn once per process (0.6 s; a
    sweep loads the task once per run)."""
    return frozenset(it.question for it in generate("train", TRAIN_SIZE, seed))


def extract_strict(response: str) -> str | None:
    """The number on the first `#### ` line (GSM8K strict match), or None."""
    m = STRICT_MATCH.search(response)
    return m.group(1) if m else None


def strict_match(response: str, gold: str) -> bool:
    return extract_strict(response) == gold

"""The cost model held against published GPU measurements of draft-model speculative decoding
(`published_gpu.yaml`): for each, the speedup `plan`'s model predicts from that measurement's own hardware,
engine, pair, draft length and acceptance, beside what the source measured. Two predictions: the model's
forwards alone (memory, compute or launch floor: what `plan` priced before), and with the engine's host time
per forward call (`forward_s`: the Python and scheduling around each forward, fitted to one point per
engine and checked on the others). `python -m cactus_bench.tools.published` prints the table docs/gpu.md holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from cactus_bench.tools.plan import MODELS, Shape, forward_seconds, iid_accepted, iid_alpha, round_speedup

DATA = Path(__file__).with_name("published_gpu.yaml")
HF_SCHEDULE_START, HF_SCHEDULE_CAP = 5, 64  # transformers' heuristic draft length: its start, and a bound here


@dataclass(frozen=True)
class EngineCost:
    launch_s_per_layer: float
    fitted_on: str  # the point whose measurement fixes the engine's host time per forward call
    draft_launch_s_per_layer: float | None = None  # where the draft runs otherwise (vLLM V0: CUDA graphs)


@dataclass(frozen=True)
class Point:
    id: str
    cite: str
    reference: str
    gpu: str
    engine: str
    verifier: str
    drafter: str
    task: str
    m: int | str  # a fixed draft length, or "heuristic" (transformers' schedule)
    speedup: float
    context: int
    tau: float | None = None  # tokens per verifier call, as the source states it
    al_at_20: float | None = None  # or the AL it states at m = 20, carried to m (derived)


@cache
def load() -> tuple[dict[str, EngineCost], list[Point]]:
    data = yaml.safe_load(DATA.read_text())
    engines = {name: EngineCost(**{k: v for k, v in e.items() if k != "about"}) for name, e in data["engines"].items()}
    return engines, [Point(**p) for p in data["points"]]


@cache
def heuristic_schedule(alpha: float) -> tuple[float, float]:
    """(accepted, drafted) per round under transformers' heuristic schedule (start at 5 drafts; +2 after a
    round that accepted all, else −1, at least 1) with each draft accepted with probability α: the stationary
    law of the draft length's Markov chain, by iterating it."""
    law = {HF_SCHEDULE_START: 1.0}
    for _ in range(1000):  # the chain mixes in tens of rounds
        nxt: dict[int, float] = {}
        for m, p in law.items():
            full = alpha**m
            up, down = min(m + 2, HF_SCHEDULE_CAP), max(m - 1, 1)
            nxt[up] = nxt.get(up, 0.0) + p * full
            nxt[down] = nxt.get(down, 0.0) + p * (1 - full)
        law = nxt
    return sum(p * iid_accepted(alpha, m) for m, p in law.items()), sum(p * m for m, p in law.items())


@cache
def acceptance(point: Point) -> tuple[float, float]:
    """(τ: tokens per verifier call, k̄: drafts per call) for the point: τ as stated (its drafts per call from
    the i.i.d. law that gives it, under the point's schedule), or carried from its m = 20 AL (derived)."""
    if point.m == "heuristic":
        assert point.tau is not None
        lo, hi = 0.0, 0.999
        for _ in range(60):  # accepted per round rises with α: bisect for the stated τ
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if heuristic_schedule(mid)[0] < point.tau - 1 else (lo, mid)
        return point.tau, heuristic_schedule((lo + hi) / 2)[1]
    m = int(point.m)
    if point.tau is not None:
        return point.tau, float(m)
    assert point.al_at_20 is not None
    return 1 + iid_accepted(iid_alpha(point.al_at_20, 20), m), float(m)


def predict(point: Point, host_s: float | None = None) -> float:
    """`plan.round_speedup` with the step times of `plan.forward_seconds` on the point's GPU with its engine's
    launch floors, and o the host time per forward call (default: the engine's fitted one)."""
    engines, _ = load()
    cost = engines[point.engine]
    verifier, drafter = MODELS[point.verifier], MODELS[point.drafter]
    tau, drafts = acceptance(point)
    o = host_time(point.engine) if host_s is None else host_s
    draft_launch = cost.draft_launch_s_per_layer or cost.launch_s_per_layer

    def step(shape: Shape, launch: float, tokens: int = 1) -> float:
        return forward_seconds(shape, point.gpu, launch, tokens, 1, point.context)

    t_1 = step(verifier, cost.launch_s_per_layer)
    verify = step(verifier, cost.launch_s_per_layer, round(drafts) + 1)
    return round_speedup(tau, drafts, step(drafter, draft_launch), t_1, verify, o)


@cache
def host_time(engine: str) -> float:
    """The engine's host time per forward call that predicts its `fitted_on` point exactly (the prediction
    falls as it grows, for any speedup above what τ / (k̄ + 1) allows: bisection)."""
    engines, points = load()
    point = next(p for p in points if p.id == engines[engine].fitted_on)
    lo, hi = 0.0, 0.1
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predict(point, mid) > point.speedup else (lo, mid)
    return (lo + hi) / 2


def errors() -> dict[str, tuple[float, float]]:
    """Each point's relative error (prediction / measurement − 1): forwards only, and with host time."""
    _, points = load()
    return {p.id: (predict(p, 0.0) / p.speedup - 1, predict(p) / p.speedup - 1) for p in points}


def table() -> str:
    """docs/gpu.md's table: every point, both predictions and their errors, the fitted host times, and the
    error's range over the points no engine was fitted on."""
    engines, points = load()
    lines = [
        "| measurement | GPU | engine | pair | m (k̄) | τ | measured | forwards only | with host time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    err = errors()
    for p in points:
        tau, drafts = acceptance(p)
        bare, full = err[p.id]
        m = f"{p.m} ({drafts:.2f})" if p.m == "heuristic" else str(p.m)
        derived = " (derived)" if p.tau is None else ""
        pair = f"{p.drafter.split('/')[-1]} → {p.verifier.split('/')[-1]}"
        fitted = " (fitted)" if p.id == engines[p.engine].fitted_on else ""
        lines.append(
            f"| {p.cite} | {p.gpu} | {p.engine} | {pair} | {m} | {tau:.2f}{derived} | {p.speedup:.2f}× "
            f"| {predict(p, 0.0):.2f}× ({bare:+.0%}) | {predict(p):.2f}× ({full:+.0%}){fitted} |"
        )
    checked = [err[p.id][1] for p in points if p.id != engines[p.engine].fitted_on]
    high = sum(bare > 0 for bare, _ in err.values())
    lines += [
        "",
        f"Forwards only, {high} of {len(points)} points are predicted high (by {min(b for b, _ in err.values()):+.0%} "
        f"to {max(b for b, _ in err.values()):+.0%}). With each engine's host time per forward call "
        + ", ".join(f"{name} {1000 * host_time(name):.1f} ms" for name in engines)
        + f", the {len(checked)} points no engine was fitted on lie within {min(checked):+.0%} to "
        f"{max(checked):+.0%} of their measurements.",
        "",
        *(f"- {p.cite}: {p.reference}; {p.task}." for p in points),
    ]
    return "\n".join(lines) + "\n"


def main() -> str:
    text = table()
    print(text)
    return text


if __name__ == "__main__":
    main()

"""Acceptance per draft position (vLLM's and SPEED-Bench's per-position figures), from two list counters
of each sample: `accepted_hist` (rounds that accepted exactly k drafts) and `tested_at` (rounds whose draft j
was tested). Each is a positional metric: its value a list over positions, each entry a ratio of counters
with its own interval clustered by item, and a table column `<name>_<position>` per position."""

from __future__ import annotations

from cactus_bench.core.intervals import ratio_interval
from cactus_bench.core.metrics.registry import METRICS, Metric, _ratio, pooled_metric


def passed_at(hist: list[int] | None) -> list[int] | None:
    """Rounds whose draft j passed (j = 1..m: at least j drafts accepted), from the histogram of accepted
    drafts per round."""
    if hist is None:
        return None
    return [sum(hist[j:]) for j in range(1, len(hist))]


def count(c: dict, name: str):
    """A counter of `c` by name, or one derived from them: `passed_at`, `accept_none` (rounds that accepted
    no draft)."""
    if name == "passed_at":
        return passed_at(c.get("accepted_hist"))
    if name == "accept_none":
        hist = c.get("accepted_hist")
        return hist[0] if hist else None
    return c.get(name)


def _per_position(num: list | None, den) -> list[float | None] | None:
    if num is None or den is None:
        return None
    dens = den if isinstance(den, list) else [den] * len(num)
    return [_ratio(a, b) for a, b in zip(num, dens)]


@pooled_metric(
    "acc. at j (given 1..j−1)", "{:.2f}", ratio=("passed_at", "tested_at"), better="higher", bounds=(0.0, 1.0),
    positional=True,
)  # fmt: skip
def acceptance_at(c: dict) -> list[float | None] | None:
    """Per draft position j: P(draft j accepted | drafts 1..j−1 accepted), the rounds whose draft j passed
    over the rounds that tested it (a round cut short by EOS or the budget tests fewer positions)."""
    return _per_position(count(c, "passed_at"), c.get("tested_at")) if c.get("drafted") else None


@pooled_metric(
    "P(≥ j accepted)", "{:.2f}", ratio=("passed_at", "verifier_calls"), better="higher", bounds=(0.0, 1.0),
    positional=True,
)  # fmt: skip
def accepted_at_least(c: dict) -> list[float | None] | None:
    """Per draft position j: the share of verifier calls that accepted at least j drafts (marginal). Summed
    over j it is AL (Σ rounds) exactly."""
    return _per_position(count(c, "passed_at"), c["verifier_calls"]) if c.get("drafted") else None


@pooled_metric(
    "rounds accepting k", "{:.2f}", ratio=("accepted_hist", "verifier_calls"), better="neither", bounds=(0.0, 1.0),
    positional=True, first_position=0,
)  # fmt: skip
def accepted_histogram(c: dict) -> list[float | None] | None:
    """Per k = 0..m: the share of verifier calls that accepted exactly k drafts (the histogram of accepted
    drafts per round; its counts are the `accepted_hist` counter, which sums to the verifier calls)."""
    return _per_position(c.get("accepted_hist"), c["verifier_calls"]) if c.get("drafted") else None


@pooled_metric("accept none", "{:.0%}", ratio=("accept_none", "verifier_calls"), better="lower", bounds=(0.0, 1.0))
def accept_none_share(c: dict) -> float | None:
    """The share of verifier calls that accepted no draft (the histogram's k = 0)."""
    return _ratio(count(c, "accept_none"), c["verifier_calls"]) if c.get("drafted") else None


def position_entries(m: Metric, summary: dict) -> dict:
    """A positional metric of a summary as one entry per position, `<name>_<position>` (with `_ci`): what a
    table column, a dashboard key or a tracker's summary reads."""
    values, intervals = summary.get(m.name), summary.get(f"{m.name}_ci") or []
    out = {}
    for i, value in enumerate(values or []):
        out[f"{m.name}_{m.first_position + i}"] = value
        out[f"{m.name}_{m.first_position + i}_ci"] = intervals[i] if i < len(intervals) else None
    return out


def column_metric(column: str) -> tuple[Metric, int | None] | None:
    """The metric a table column shows, and its draft position for a positional metric's column
    (`acceptance_at_2`: draft 2); None for a column that is no metric's."""
    if column in METRICS:
        return METRICS.get(column), None
    name, _, position = column.rpartition("_")
    if position.isdigit() and name in METRICS and METRICS.get(name).positional:
        return METRICS.get(name), int(position)
    return None


def expand_columns(columns: list[str], m: int) -> list[str]:
    """A spec's columns with each positional metric's name spread over its positions (1..m, or 0..m)."""
    out = []
    for col in columns:
        metric = METRICS.get(col) if col in METRICS else None
        if metric is not None and metric.positional:
            out += [f"{col}_{j}" for j in range(metric.first_position, m + 1)]
        else:
            out.append(col)
    return out


def position_intervals(m: Metric, samples: list[dict], positions: int) -> list[list[float] | None]:
    """A positional ratio metric's 95 % interval at each position, clustered by item (`ratio_interval` over
    the items' numerator and denominator at that position); None where it has none."""
    assert m.ratio is not None, f"{m.name} is not a ratio metric"
    num, den = m.ratio
    out: list[list[float] | None] = []
    for i in range(positions):
        pairs = []
        for s in samples:
            a, b = count(s["stats"], num), count(s["stats"], den)
            if a is None or b is None:
                continue
            a_i = a[i] if i < len(a) else 0
            b_i = (b[i] if i < len(b) else 0) if isinstance(b, list) else b
            pairs.append((a_i, b_i))
        est = ratio_interval(pairs, m.bounds)
        if est is None or est.low is None or est.high is None:
            out.append(None)
        else:
            out.append([est.low, est.high])
    return out

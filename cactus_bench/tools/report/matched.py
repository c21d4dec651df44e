"""Relaxed rules read at matched acceptance (a spec's `matched:`): each rule is a curve through its knob's grid,
so rules are compared where they reach the same accepted length AL, not at their arbitrary knob values.

A rule's curve is its grid's points, in AL order, starting at the SpS run: every relaxed rule is SpS at its
knob's end (`Rule.sps_knob`). At a target AL the curve is read between the two points around it (linear in
AL): Δ score against the verifier, output KL and speedup. An interval is the two points' paired intervals
read the same way, which is never narrower than the interpolated difference's own (the standard deviation of
a weighted sum of two per-item differences is at most the weighted sum of theirs). The AL of each point is
taken as exact (its own interval is a fraction of the grid's spacing). A curve that does not reach a target
AL reads "not reached" there, never an extrapolation.

`score_budget: b` adds the AL each rule reaches while its Δ score stays ≥ −b: the last crossing along its
curve, and the same for its interval's lower and upper ends (the conservative and the hopeful reading).
"""

from __future__ import annotations

import math

import pandas as pd

from cactus_bench.core.methods import is_baseline

AL, DELTA, KL, SPEEDUP = "accepted_length", "score_delta", "output_kl", "paired_speedup"
READ = (DELTA, KL, SPEEDUP)


def curves(spec: dict, df: pd.DataFrame, data: str) -> dict[str, list[dict]]:
    """Each rule's points for one dataset, sorted by AL: {"label", "al", metric: (value, low, high)}; a rule
    with a knob starts at SpS's point. Rows without a run (or an AL) are left out."""
    cells = df[df["data"] == data]

    def point(label: str) -> dict | None:
        rows = cells[cells["label"] == label].set_index("metric")
        if AL not in rows.index or _missing(rows.at[AL, "ours"]):
            return None
        out: dict = {"label": label, "al": float(rows.at[AL, "ours"])}
        for metric in READ:
            value = rows.at[metric, "ours"] if metric in rows.index else None
            ci = rows.at[metric, "ci"] if metric in rows.index else None
            low, high = ci if isinstance(ci, (list, tuple)) else (None, None)
            out[metric] = (None if _missing(value) else float(value), low, high)
        return out

    sps = next((point(r["label"]) for r in spec["rows"] if r["method"] == "sps"), None)
    found: dict[str, list[dict]] = {}
    for row in spec["rows"]:
        if is_baseline(row["method"]) or row["method"] == "sps":
            continue
        p = point(row["label"])
        if p is not None:
            found.setdefault(row.get("curve", row["label"]), []).append(p)
    return {name: sorted(([sps] if sps else []) + pts, key=lambda p: p["al"]) for name, pts in found.items()}


def at(curve: list[dict], al: float, metric: str) -> tuple[float | None, float | None, float | None] | None:
    """(value, low, high) of `metric` at accepted length `al` on the curve; None where the curve does not
    reach it (or a point lacks the metric)."""
    for a, b in zip(curve, curve[1:]):
        if a["al"] <= al <= b["al"]:
            w = 0.0 if b["al"] == a["al"] else (al - a["al"]) / (b["al"] - a["al"])
            return tuple(_mix(x, y, w) for x, y in zip(a[metric], b[metric]))  # type: ignore[return-value]
    if len(curve) == 1 and curve[0]["al"] == al:
        return curve[0][metric]
    return None


def al_within(curve: list[dict], budget: float, end: int = 0) -> float | None:
    """The largest AL along the curve whose Δ score (`end` 0; 1: its interval's low end; 2: its high end) is
    ≥ −budget, crossings read linearly between points; None where no point is within the budget."""
    best = None
    for a, b in zip(curve, curve[1:]):
        da, db = a[DELTA][end], b[DELTA][end]
        if da is None or db is None:
            continue
        if da >= -budget:
            best = max(best or a["al"], a["al"])
        if db >= -budget:
            best = max(best or b["al"], b["al"])
        elif da >= -budget:  # the crossing inside this segment
            best = max(best or a["al"], a["al"] + (b["al"] - a["al"]) * (da + budget) / (da - db))
    if len(curve) == 1 and curve[0][DELTA][end] is not None and curve[0][DELTA][end] >= -budget:
        best = curve[0]["al"]
    return best


def matched_table(spec: dict, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """The long table (data, rule, AL, Δ score, output KL, speedup, each with its interval), the budget table
    (data, rule, AL at Δ ≥ −b with its conservative and hopeful readings) or None, and notes."""
    settings = spec["matched"]
    targets, budget = settings.get("accepted_length", []), settings.get("score_budget")
    rows, budget_rows, notes = [], [], []
    for data in dict.fromkeys(df["data"]):
        for name, curve in curves(spec, df, data).items():
            for al in targets:
                record = {"data": data, "rule": name, "AL": al}
                for metric in READ:
                    value = at(curve, al, metric)
                    record[metric], record[f"{metric}_ci"] = (
                        (value[0], None if value[1] is None else (value[1], value[2])) if value else (None, None)
                    )
                if all(record[m] is None for m in READ):
                    notes.append(f"{data}: {name} does not reach AL {al:g} on its grid (ALs {_span(curve)})")
                rows.append(record)
            if budget is not None:
                budget_rows.append(
                    {
                        "data": data,
                        "rule": name,
                        "AL": al_within(curve, budget),
                        "conservative": al_within(curve, budget, 1),
                        "hopeful": al_within(curve, budget, 2),
                    }  # fmt: skip
                )
    table = pd.DataFrame(rows)
    unread = any(r[KL] is None and r[DELTA] is not None for r in rows)
    if unread or any(r[KL] == math.inf for r in rows):
        notes.append(
            "output KL inf: the rule emits tokens the warped verifier gives no mass (a drafter trusted wholesale); "
            "between a finite and an infinite point it is not read (–)"
        )
    return table, pd.DataFrame(budget_rows) if budget is not None else None, notes


def _mix(x, y, w):
    if x is None or y is None or _missing(x) or _missing(y):
        return None
    if math.isinf(x) != math.isinf(y):  # a finite and an infinite KL: no line between them says anything
        return None
    return (1 - w) * float(x) + w * float(y)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _span(curve: list[dict]) -> str:
    return f"{curve[0]['al']:.2f}–{curve[-1]['al']:.2f}" if curve else "none"

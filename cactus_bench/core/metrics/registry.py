"""The metric registry: `Metric`, the additive counters metrics read, and the decorators that define a
metric (`pooled_metric`, `relative_metric`, `sampled_metric`); the definitions are in `metrics/__init__`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from cactus_bench.core.intervals import Estimate
from cactus_bench.core.registry import Registry

COUNTERS = (
    "new_tokens",
    "verifier_calls",
    "drafted",
    "accepted",
    "accepted_any",
    "rejected",
    "kl_sum",  # the target's KL (stored under these names since before the output KL existed)
    "kl_count",
    "out_kl_sum",
    "out_kl_count",
    "out_kl_skipped",
    "wall_time",
    "prefill_time",
    "t_draft",
    "t_verify",
    "t_rule",
    "t_other",
    "generations",
    "length_stops",
    "paired_baseline_time",  # paired timing: the verifier alone on the same item, back to back
    "paired_method_time",
    "paired_baseline_tokens",
    # the paired decode's parts, for the cost model (`cost_model.py`): the method's tokens, verifier calls,
    # drafts, draft / verify / prefill times, and the verifier alone's verify and prefill times
    "paired_method_tokens",
    "paired_method_calls",
    "paired_method_drafted",
    "paired_method_draft_time",
    "paired_method_verify_time",
    "paired_method_prefill_time",
    "paired_baseline_verify_time",
    "paired_baseline_prefill_time",
    # per draft position (lists, summed position by position): rounds that accepted exactly k drafts (k =
    # 0..m), and rounds whose draft j was tested (j = 1..m: drafted, and drafts 1..j-1 accepted)
    "accepted_hist",
    "tested_at",
)
LIST_COUNTERS = frozenset({"accepted_hist", "tested_at"})
REFERENCES = ("sps", "baseline")


@dataclass(frozen=True)
class Metric:
    name: str
    label: str  # column header in tables and figures
    fmt: str = "{:.3g}"
    timed: bool = False  # a wall-time figure: its conditions must match (`timing_caveat`)
    pooled: Callable[[dict], float | None] | None = None  # counters -> value
    ratio: tuple[str, str] | None = None  # a pooled Σ numerator / Σ denominator: its interval is clustered by item
    relative: Callable[[list[dict], list[dict]], float | Estimate | None] | None = None  # (samples, refs)
    reference: str | None = None  # which reference run `relative` needs
    sampled: Callable[[list[dict]], float | Estimate | None] | None = None  # samples -> value
    tracked: bool = True  # logged to the tracker's run summary
    cli: bool = False  # printed by `python -m cactus_bench` at the end of a run
    better: str = "neither"  # "higher" or "lower" is better (dashboards' goals), or "neither" (a diagnostic)
    floor: float = 0.0  # values nearer 0 than this are rounding, printed as 0 (the stored value is kept)
    bounds: tuple[float, float] = (0.0, math.inf)  # what a ratio metric can be: its interval stays inside
    # a profile over draft positions: its value is a list, entry i for position first_position + i, and a
    # table asks for one position as the column `<name>_<position>` (`positions.column`)
    positional: bool = False
    first_position: int = 1
    paired: bool = False  # a relative metric of both runs' paired timings (its caveat reads their timed items)

    def format(self, value) -> str:
        if isinstance(value, list):
            return " / ".join("–" if v is None else self.format(v) for v in value)
        return self.fmt.format(0.0 if abs(value) < self.floor else value)


BETTER = ("higher", "lower", "neither")


def _check_metric(name: str, metric: Metric) -> None:
    if not isinstance(metric, Metric) or metric.name != name:
        raise TypeError(f"metric {name!r}: register a Metric named {name!r}")
    if metric.better not in BETTER:
        raise ValueError(f"metric {name!r}: better={metric.better!r}; say which is better, one of {BETTER}")
    if sum(f is not None for f in (metric.pooled, metric.relative, metric.sampled)) > 1:
        raise ValueError(f"metric {name!r}: pooled, relative or sampled, one of them")
    if (metric.relative is not None) != (metric.reference in REFERENCES):
        raise ValueError(f"metric {name!r}: a relative metric names its reference run, one of {REFERENCES}")


METRICS: Registry[Metric] = Registry("metric", _check_metric, group="cactus_bench.metrics")


def pooled_metric(
    label: str,
    fmt: str = "{:.3g}",
    tracked: bool = True,
    cli: bool = False,
    ratio: tuple[str, str] | None = None,
    *,
    better: str,
    floor: float = 0.0,
    bounds: tuple[float, float] = (0.0, math.inf),
    positional: bool = False,
    first_position: int = 1,
):
    """Decorator: register a function of the pooled counters as the metric of the same name. `ratio` names
    its numerator and denominator counters when it is Σ numerator / Σ denominator over items: summaries then
    store its 95 % interval (`ratio_interval`) under `<name>_ci`. `better`: higher, lower or neither.
    `positional`: the value is a list over draft positions (from `first_position`), each entry its own
    ratio of the list counters `ratio` names, with its own interval."""

    def deco(fn: Callable[[dict], float | None]) -> Callable[[dict], float | None]:
        metric = Metric(
            fn.__name__,
            label,
            fmt,
            pooled=fn,
            ratio=ratio,
            tracked=tracked,
            cli=cli,
            better=better,
            floor=floor,
            bounds=bounds,
            positional=positional,
            first_position=first_position,
        )
        METRICS.add(fn.__name__, metric)
        return fn

    return deco


def relative_metric(
    label: str,
    reference: str,
    fmt: str = "{:.3g}",
    tracked: bool = True,
    timed: bool = False,
    cli: bool = False,
    *,
    better: str,
    paired: bool = False,
):
    def deco(fn: Callable[[list[dict], list[dict]], float | None]):
        metric = Metric(
            fn.__name__,
            label,
            fmt,
            relative=fn,
            reference=reference,
            tracked=tracked,
            timed=timed,
            cli=cli,
            better=better,
            paired=paired,
        )
        METRICS.add(fn.__name__, metric)
        return fn

    return deco


def sampled_metric(
    label: str, fmt: str = "{:.3g}", tracked: bool = True, cli: bool = False, timed: bool = False, *, better: str
):
    def deco(fn: Callable[[list[dict]], float | Estimate | None]):
        metric = Metric(fn.__name__, label, fmt, sampled=fn, tracked=tracked, cli=cli, timed=timed, better=better)
        METRICS.add(fn.__name__, metric)
        return fn

    return deco


def flatten(name: str, value: float | Estimate | None) -> dict:
    """A metric's entries in a summary: the value, and for an `Estimate` its interval under `<name>_ci` and
    the number of items it was computed on under `<name>_n`."""
    if isinstance(value, Estimate):
        interval = None if value.low is None else [value.low, value.high]  # none below intervals.MIN_ITEMS
        return {name: value.value, f"{name}_ci": interval, f"{name}_n": value.items}
    return {name: value}


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if (num is not None and den) else None

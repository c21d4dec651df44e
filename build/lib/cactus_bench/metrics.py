"""Run metrics (methods.md §4), defined once each in one registry. Core: plain Python, no dependencies.

Each sample's `stats` holds additive counters (`COUNTERS`: new_tokens, verifier_calls, drafted, accepted,
rejected, kl_sum, kl_count, wall_time, ...) plus the pooled metrics of that sample. A run's metrics pool the
counters over its samples first (AL = all accepted drafts / all verifier calls: the paper's AL_m is a mean
over all verifier calls of a run), then apply the same definitions.

A metric is one `Metric` in `METRICS`; the summary, the reports' labels, tracking and the CLI all read it:

* a *pooled* metric is a function of the pooled counters (`@pooled_metric`);
* a *relative* metric compares a run's samples with a reference run's (`reference` = "sps" or
  "baseline", the verifier alone);
* a metric with neither is supplied by the benchmark (the task score).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .registry import Registry

COUNTERS = (
    "new_tokens",
    "verifier_calls",
    "drafted",
    "accepted",
    "accepted_any",
    "rejected",
    "kl_sum",
    "kl_count",
    "wall_time",
    "prefill_time",
    "t_draft",
    "t_verify",
    "t_rule",
    "t_other",
    "generations",
    "length_stops",
)
REFERENCES = ("sps", "baseline")


@dataclass(frozen=True)
class Metric:
    name: str
    label: str  # column header in tables and figures
    fmt: str = "{:.3g}"
    pooled: Callable[[dict], float | None] | None = None  # counters -> value
    relative: Callable[[list[dict], list[dict]], float | None] | None = None  # (samples, reference samples)
    reference: str | None = None  # which reference run `relative` needs
    tracked: bool = True  # logged to the tracker's run summary
    cli: bool = False  # printed by `python -m cactus_bench` at the end of a run

    def format(self, value: float) -> str:
        return self.fmt.format(value)


def _check_metric(name: str, metric: Metric) -> None:
    if not isinstance(metric, Metric) or metric.name != name:
        raise TypeError(f"metric {name!r}: register a Metric named {name!r}")
    if metric.pooled is not None and metric.relative is not None:
        raise ValueError(f"metric {name!r}: pooled or relative, not both")
    if (metric.relative is not None) != (metric.reference in REFERENCES):
        raise ValueError(f"metric {name!r}: a relative metric names its reference run, one of {REFERENCES}")


METRICS: Registry[Metric] = Registry("metric", _check_metric)


def pooled_metric(label: str, fmt: str = "{:.3g}", tracked: bool = True, cli: bool = False):
    """Decorator: register a function of the pooled counters as the metric of the same name."""

    def deco(fn: Callable[[dict], float | None]) -> Callable[[dict], float | None]:
        METRICS.add(fn.__name__, Metric(fn.__name__, label, fmt, pooled=fn, tracked=tracked, cli=cli))
        return fn

    return deco


def relative_metric(label: str, reference: str, fmt: str = "{:.3g}", tracked: bool = True):
    def deco(fn: Callable[[list[dict], list[dict]], float | None]):
        METRICS.add(fn.__name__, Metric(fn.__name__, label, fmt, relative=fn, reference=reference, tracked=tracked))
        return fn

    return deco


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if (num is not None and den) else None


# --- the definitions -----------------------------------------------------------------------------------

METRICS.add("score", Metric("score", "score", "{:.2f}", cli=True))  # the task's primary metric (benchmark)


@pooled_metric("AL", "{:.2f}", cli=True)
def accepted_length(c: dict) -> float | None:
    """Drafts accepted before the first rejection, per verifier call (the paper's AL_m)."""
    return _ratio(c["accepted"], c["verifier_calls"])


@pooled_metric("τ", "{:.2f}", cli=True)
def tau(c: dict) -> float | None:
    """Emitted tokens per verifier call (Spec-Bench's mean accepted tokens; 1 for the verifier alone)."""
    return _ratio(c["new_tokens"], c["verifier_calls"])


@pooled_metric("acc. rate (any)", cli=True)
def acceptance_rate(c: dict) -> float | None:
    """Drafts whose accept test passed, at any position, / drafts (what vLLM's spec-decode counters report,
    and what a "96 % acceptance" can only mean)."""
    return _ratio(c["accepted_any"], c["drafted"])


@pooled_metric("acc. rate (prefix)", cli=True)
def prefix_acceptance(c: dict) -> float | None:
    """Drafts accepted before the first rejection / drafts: AL / m when every call drafts m."""
    return _ratio(c["accepted"], c["drafted"])


@pooled_metric("KL", cli=True)
def realised_kl(c: dict) -> float | None:
    """Mean over verified positions of KL(h‖q) for the target the rule verified against."""
    return _ratio(c["kl_sum"], c["kl_count"])


@pooled_metric("rej/token")
def rejected_per_token(c: dict) -> float | None:
    """r = Σ(drafted − accepted) / Σ emitted: the quantity Rej compares."""
    return _ratio(c["rejected"], c["new_tokens"])


@pooled_metric("stopped on length", "{:.0%}", cli=True)
def length_stopped(c: dict) -> float | None:
    """Share of generations that ran out of tokens (max_gen_toks) rather than ending or hitting a stop."""
    return _ratio(c["length_stops"], c["generations"])


@pooled_metric("tok/s", cli=True)
def tokens_per_s(c: dict) -> float | None:
    return _ratio(c["new_tokens"], c["wall_time"])


@relative_metric("Rej %", reference="sps", fmt="{:+.0f}%")
def rej(samples: list[dict], sps_samples: list[dict]) -> float | None:
    """Relative change (%) of rejected drafts per emitted token vs SpS; negative is better."""
    r = rejected_per_token(pool(samples))
    r_sps = rejected_per_token(pool(sps_samples))
    return 100.0 * (r / r_sps - 1.0) if (r is not None and r_sps) else None


@relative_metric("speedup", reference="baseline", fmt="{:.2f}×")
def speedup(samples: list[dict], baseline_samples: list[dict]) -> float | None:
    """The paper's speedup: time(verifier alone) / time(method), summed over the items both runs finished
    (the authors time the whole task; per-item sums leave out only the harness's own work)."""
    figures = speedups(samples, baseline_samples)
    return figures["task_time"] if figures else None


@relative_metric("throughput ×", reference="baseline", fmt="{:.2f}×")
def throughput_speedup(samples: list[dict], baseline_samples: list[dict]) -> float | None:
    """(tokens/s of the method) / (tokens/s of the verifier alone) over the items both runs finished."""
    figures = speedups(samples, baseline_samples)
    return figures["throughput"] if figures else None


# --- pooling --------------------------------------------------------------------------------------------


def pool(samples: list[dict]) -> dict:
    """Sum each counter over samples' `stats` (None when no sample has it, e.g. KL for target-free rules)."""
    return add_stats([s["stats"] for s in samples])


def add_stats(parts: list[dict]) -> dict:
    """Sum the counters of several statistics (samples of a run, or the turns of a conversation)."""
    out = {}
    for key in COUNTERS:
        values = [p.get(key) for p in parts]
        out[key] = None if all(v is None for v in values) else sum(v or 0 for v in values)
    return out


def derive(counters: dict) -> dict:
    """Every pooled metric of these counters."""
    return {m.name: m.pooled(counters) for m in METRICS.values() if m.pooled is not None}


def decode_metrics(samples: list[dict]) -> dict:
    """A run's decode metrics: sample count, the headline counters and every pooled metric."""
    c = pool(samples)
    return {
        "samples": len(samples),
        "new_tokens": c["new_tokens"] or 0,
        "verifier_calls": c["verifier_calls"] or 0,
        "wall_time": c["wall_time"] or 0,
        **derive(c),
    }


def speedups(samples: list[dict], baseline_samples: list[dict]) -> dict | None:
    """Wall-time speedup over the verifier alone on the samples both runs finished: throughput ratio
    (tokens/s) and the whole-task time ratio the paper reports."""
    base = {s["id"]: s for s in baseline_samples}
    common = [s for s in samples if s["id"] in base]
    if not common:
        return None
    ours, theirs = pool(common), pool([base[s["id"]] for s in common])
    return {
        "throughput": _ratio(tokens_per_s(ours), tokens_per_s(theirs)),
        "task_time": _ratio(theirs["wall_time"], ours["wall_time"]),
        "common_samples": len(common),
    }


def relative(metric: Metric, samples: list[dict], references: dict[str, list[dict] | None]) -> float | None:
    """A relative metric's value against its reference run's samples (None when that run is missing)."""
    ref = references.get(metric.reference)
    return metric.relative(samples, ref) if ref is not None else None

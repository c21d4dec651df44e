"""Run metrics (methods.md §4), defined once each in one registry. Core: plain Python, no dependencies.

Each sample's `stats` holds additive counters (`COUNTERS`: new_tokens, verifier_calls, drafted, accepted,
rejected, kl_sum, kl_count, wall_time, ...) plus the pooled metrics of that sample. A run's metrics pool the
counters over its samples first (AL = all accepted drafts / all verifier calls: the paper's AL_m is a mean
over all verifier calls of a run), then apply the same definitions.

A metric is one `Metric` in `METRICS`; the summary, the reports' labels, tracking and the CLI all read it:

* a *pooled* metric is a function of the pooled counters (`@pooled_metric`);
* a *relative* metric compares a run's samples with a reference run's (`reference` = "sps" or
  "baseline", the verifier alone);
* a *sampled* metric needs the samples themselves (`@sampled_metric`): the paired speedup, whose
  interval is Fieller's over items;
* a metric with none of these is supplied by the benchmark (the task score).

A metric may return an `Estimate` (value and 95 % interval); summaries and tables store the value under the
metric's name and the interval under `<name>_ci`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from cactus_bench.core.intervals import Estimate, mean_interval, paired_difference, ratio_interval, ratio_of_ratios
from cactus_bench.core.metrics.registry import (  # noqa: F401  (the registry's names, read as metrics.X)
    BETTER,
    COUNTERS,
    LIST_COUNTERS,
    METRICS,
    REFERENCES,
    Metric,
    _ratio,
    flatten,
    pooled_metric,
    relative_metric,
    sampled_metric,
)
from cactus_bench.core.metrics.timing_conditions import timing_caveat

# --- the definitions -----------------------------------------------------------------------------------

METRICS.add("score", Metric("score", "score", "{:.2f}", cli=True))  # the task's primary metric (benchmark)
METRICS.add("n", Metric("n", "n", "{:.0f}", tracked=False))  # the items a table's cells are computed on


@pooled_metric("AL (Σ rounds)", "{:.2f}", cli=True, ratio=("accepted", "verifier_calls"), better="higher")
def accepted_length(c: dict) -> float | None:
    """Drafts accepted before the first rejection, per verifier call, pooled over every round of the run (the
    paper's AL_m: Σ accepted / Σ verifier calls, so a long reply weighs more); none without drafts (the
    verifier alone), not 0. `item_accepted_length` is the mean of per-item ALs."""
    return _ratio(c["accepted"], c["verifier_calls"]) if c["drafted"] else None


@sampled_metric("AL (item mean)", "{:.2f}", better="higher")
def item_accepted_length(samples: list[dict]) -> Estimate | None:
    """The mean over items of each item's own AL (its accepted drafts / its verifier calls), with a 95 % t
    interval over items: every item weighs the same, whatever its length (`accepted_length` pools rounds)."""
    per_item = [
        s["stats"]["accepted"] / s["stats"]["verifier_calls"]
        for s in samples
        if s["stats"].get("drafted") and s["stats"].get("verifier_calls")
    ]
    return mean_interval(per_item, (0.0, math.inf)) if per_item else None


@pooled_metric("τ", "{:.2f}", cli=True, ratio=("new_tokens", "verifier_calls"), better="higher", bounds=(1.0, math.inf))
def tau(c: dict) -> float | None:
    """Emitted tokens per verifier call (Spec-Bench's mean accepted tokens; 1 for the verifier alone)."""
    return _ratio(c["new_tokens"], c["verifier_calls"])


@pooled_metric("acc. rate (any)", cli=True, ratio=("accepted_any", "drafted"), better="higher", bounds=(0.0, 1.0))
def acceptance_rate(c: dict) -> float | None:
    """Drafts whose accept test passed, at any position, / drafts (what vLLM's spec-decode counters report,
    and what a "96 % acceptance" can only mean)."""
    return _ratio(c["accepted_any"], c["drafted"])


@pooled_metric("acc. rate (prefix)", cli=True, ratio=("accepted", "drafted"), better="higher", bounds=(0.0, 1.0))
def prefix_acceptance(c: dict) -> float | None:
    """Drafts accepted before the first rejection / drafts: AL / m when every call drafts m."""
    return _ratio(c["accepted"], c["drafted"])


from cactus_bench.core.metrics.positions import (  # noqa: E402, F401  (registers them after AL's; read as metrics.X)
    column_metric,
    count,
    expand_columns,
    position_entries,
    position_intervals,
)

# A KL's per-position terms come from float32 probabilities, summed in float64: a mean below KL_FLOOR is the
# rounding of a law equal to q (SpS: ~1e-18, with last bits that differ between CPU kernel levels), not a
# divergence, and prints as 0 so a table reads the same on every machine.
KL_FLOOR = 1e-12


@pooled_metric("target KL", cli=True, ratio=("kl_sum", "kl_count"), better="lower", floor=KL_FLOOR)
def target_kl(c: dict) -> float | None:
    """Mean over decided positions of KL(h‖q) for the target the rule verified against: the divergence
    budget it spent (Cactus's δ constrains this), not what it emitted (`output_kl`)."""
    return _ratio(c["kl_sum"], c["kl_count"])


@pooled_metric("output KL", cli=True, ratio=("out_kl_sum", "out_kl_count"), better="lower", floor=KL_FLOOR)
def output_kl(c: dict) -> float | None:
    """Mean over decided positions of KL(P_out‖q), P_out the rule's exact law of the token it emits there:
    how far what the method writes strays from the verifier (0 for SpS, and for Cactus when p = q)."""
    return _ratio(c.get("out_kl_sum"), c.get("out_kl_count"))


@pooled_metric("output KL skipped", "{:.0%}", tracked=False, better="lower")
def output_kl_skipped(c: dict) -> float | None:
    """Share of decided positions left out of the output KL (supports too large to sum exactly)."""
    skipped, counted = c.get("out_kl_skipped"), c.get("out_kl_count") or 0
    return _ratio(skipped, (skipped or 0) + counted) if skipped else None


RENAMED = {"realised_kl": "target_kl"}  # metrics stored under an earlier name


def upgrade(summary: dict) -> dict:
    """A stored summary with its metrics under today's names."""
    return {RENAMED.get(k, k): v for k, v in summary.items()}


@pooled_metric("rej/token", ratio=("rejected", "new_tokens"), better="lower")
def rejected_per_token(c: dict) -> float | None:
    """r = Σ(drafted − accepted) / Σ emitted: the quantity Rej compares."""
    return _ratio(c["rejected"], c["new_tokens"])


@pooled_metric("stopped on length", "{:.0%}", cli=True, better="neither")
def length_stopped(c: dict) -> float | None:
    """Share of generations that ran out of tokens (max_gen_toks) rather than ending or hitting a stop."""
    return _ratio(c["length_stops"], c["generations"])


@pooled_metric("tok/s", cli=True, better="higher")
def tokens_per_s(c: dict) -> float | None:
    return _ratio(c["new_tokens"], c["wall_time"])


@relative_metric("Rej %", reference="sps", fmt="{:+.0f}%", better="lower")
def rej(samples: list[dict], sps_samples: list[dict]) -> Estimate | None:
    """Relative change (%) of rejected drafts per emitted token vs SpS over the items both runs decoded;
    negative is better. Its 95 % interval: `ratio_of_ratios` (the jackknife over items on the log of
    r / r_SpS), mapped to %."""
    ref = {s["id"]: s["stats"] for s in sps_samples}
    items = [
        (s["stats"]["rejected"], s["stats"]["new_tokens"], ref[s["id"]]["rejected"], ref[s["id"]]["new_tokens"])
        for s in samples
        if s["id"] in ref
    ]
    est = ratio_of_ratios(items)
    if est is None:
        return None
    low, high = (None if x is None else 100.0 * (x - 1.0) for x in (est.low, est.high))
    return Estimate(100.0 * (est.value - 1.0), low, high, est.items)


@relative_metric("Δ score vs verifier", reference="baseline", fmt="{:+.2f}", cli=True, better="higher")
def score_delta(samples: list[dict], baseline_samples: list[dict]) -> Estimate | None:
    """Mean per-item score difference against the verifier alone on the items both scored (points), with a
    95 % t interval of the paired differences (`paired_difference`). A lossless method's is 0 in expectation."""
    return paired_difference(samples, baseline_samples)


@relative_metric("Δ score vs SpS", reference="sps", fmt="{:+.2f}", better="higher")
def score_delta_sps(samples: list[dict], sps_samples: list[dict]) -> Estimate | None:
    """Mean per-item score difference against SpS on the items both scored, with its paired 95 % interval."""
    return paired_difference(samples, sps_samples)


@sampled_metric("speedup (paired, ratio of totals)", "{:.2f}×", cli=True, timed=True, better="higher")
def paired_speedup(samples: list[dict]) -> Estimate | None:
    """Paired timing: each item decoded by the verifier alone and by the method back to back in one process
    (alternating which goes first); Σ verifier-alone time / Σ method time over the items, with Fieller's
    95 % interval (`ratio_interval`). A busy machine slows both decodes of an item alike, so the ratio keeps
    its meaning. The mean of per-item ratios is `item_paired_speedup`; the prediction, `predicted_speedup`."""
    return ratio_interval(
        [(s["stats"].get("paired_baseline_time"), s["stats"].get("paired_method_time")) for s in samples]
    )


@relative_metric("speedup (task time)", reference="baseline", fmt="{:.2f}×", timed=True, better="higher")
def speedup(samples: list[dict], baseline_samples: list[dict]) -> Estimate | None:
    """The paper's speedup: time(verifier alone) / time(method), summed over the items both runs finished
    (the authors time the whole task; per-item sums leave out only the harness's own work). The two runs
    were timed at different moments: on a shared machine this measures the load too (see paired_speedup)."""
    base = {s["id"]: s["stats"]["wall_time"] for s in baseline_samples}
    return ratio_interval([(base[s["id"]], s["stats"]["wall_time"]) for s in samples if s["id"] in base])


@relative_metric("throughput ×", reference="baseline", fmt="{:.2f}×", timed=True, better="higher")
def throughput_speedup(samples: list[dict], baseline_samples: list[dict]) -> float | None:
    """(tokens/s of the method) / (tokens/s of the verifier alone) over the items both runs finished."""
    base = {s["id"]: s for s in baseline_samples}
    common = [s for s in samples if s["id"] in base]
    if not common:
        return None
    return _ratio(tokens_per_s(pool(common)), tokens_per_s(pool([base[s["id"]] for s in common])))


from cactus_bench.core.metrics import cost_model  # noqa: E402, F401  (registers the cost model's metrics)

# --- pooling --------------------------------------------------------------------------------------------


def pool(samples: list[dict]) -> dict:
    """Sum each counter over samples' `stats` (None when no sample has it, e.g. KL for target-free rules)."""
    return add_stats([s["stats"] for s in samples])


def add_stats(parts: list[dict]) -> dict:
    """Sum the counters of several statistics (samples of a run, or the turns of a conversation)."""
    out: dict[str, list | int | float | None] = {}
    for key in COUNTERS:
        values = [p.get(key) for p in parts]
        if key in LIST_COUNTERS:  # position by position; a shorter list (fewer positions tested) adds zeros
            lists = [v for v in values if isinstance(v, list)]
            out[key] = [sum(v[i] for v in lists if i < len(v)) for i in range(max(map(len, lists)))] if lists else None
        else:
            out[key] = None if all(v is None for v in values) else sum(v or 0 for v in values)
    return out


def derive(counters: dict) -> dict:
    """Every pooled metric of these counters."""
    return {m.name: m.pooled(counters) for m in METRICS.values() if m.pooled is not None}


def directions(summary: dict) -> dict[str, str]:
    """Which way is better for each metric a summary holds (as lm-eval's results say `higher_is_better`)."""
    return {k: METRICS.get(k).better for k in summary if k in METRICS}


def decode_metrics(samples: list[dict]) -> dict:
    """A run's decode metrics: sample count, the headline counters, every pooled and sampled metric."""
    c = pool(samples)
    out = {
        "samples": len(samples),
        "new_tokens": c["new_tokens"] or 0,
        "verifier_calls": c["verifier_calls"] or 0,
        "wall_time": c["wall_time"] or 0,
        **derive(c),
    }
    for m in METRICS.values():
        if m.ratio is not None and out.get(m.name) is not None:
            if m.positional:
                out[f"{m.name}_ci"] = position_intervals(m, samples, len(out[m.name]))
                continue
            num, den = m.ratio
            est = ratio_interval([(count(s["stats"], num), count(s["stats"], den)) for s in samples], m.bounds)
            if est is not None and est.low is not None:
                out[f"{m.name}_ci"] = [est.low, est.high]
        if m.sampled is not None:
            reading = read(m, samples)
            out.update(flatten(m.name, reading.value))
            if reading.caveat is not None:
                out[f"{m.name}_caveat"] = reading.caveat
    return out


def relative(metric: Metric, samples: list[dict], references: dict[str, list[dict] | None]) -> float | Estimate | None:
    """A relative metric's value against its reference run's samples (None when that run is missing)."""
    if metric.relative is None or metric.reference is None:
        raise ValueError(f"metric {metric.name!r} is not relative to a reference run")
    ref = references.get(metric.reference)
    return metric.relative(samples, ref) if ref is not None else None


class Reading(NamedTuple):
    """A metric as a reader may show it: its value (None when withheld or not computable) and, for a timed
    metric, the caveat a reader must print beside it (or the reason it was withheld)."""

    value: float | Estimate | None
    caveat: str | None = None
    withheld: bool = False

    @property
    def flagged(self) -> bool:
        return self.caveat is not None and not self.withheld


def read(metric: Metric | str, samples: list[dict], references: dict[str, list[dict] | None] | None = None) -> Reading:
    """The one way every reader (tables, figures, W&B, the CLI) reads a metric of a run's samples: pooled,
    sampled or relative (against `references`, {"sps": samples, "baseline": samples}), and for a timed metric
    its timing caveat (`timing_caveat`): a withheld value is None, a flagged one comes with its reason."""
    metric = METRICS.get(metric) if isinstance(metric, str) else metric
    references = references or {}
    if metric.relative is not None:
        value = relative(metric, samples, references)
    elif metric.sampled is not None:
        value = metric.sampled(samples)
    elif metric.pooled is not None:
        value = metric.pooled(pool(samples))
    else:
        raise ValueError(f"metric {metric.name!r} is supplied by the benchmark, not computed from samples")
    reference = references.get(metric.reference) if metric.reference is not None else None
    caveat = timing_caveat(metric, samples, reference) if value is not None else None
    if caveat is None:
        return Reading(value)
    withheld, reason = caveat
    return Reading(None if withheld else value, reason, withheld)

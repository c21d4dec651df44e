"""The cost model held against the clock: what one round of a method and one step of the verifier alone
cost, measured in the timed sample's paired decodes (the same process, back to back, batch size 1), and the
speedup they predict with the run's acceptance profile (docs/statistics.md, "The cost model"):

    t_d      drafter time per draft made          t₁       verifier-alone time per token (its forward)
    t_{m+1}  verifier time per round (m + 1 tok)  o, o₁    time outside forwards per round / per token
    τ, k̄     the run's tokens and drafts per verifier call (every item, not just the timed ones)

    predicted = (Σ P_b + (t₁ + o₁) · Σ N_b) / (Σ P_m + (Σ N_m / τ) · (k̄ · t_d + t_{m+1} + o))

over the timed items (P: prefill time, N: tokens emitted). With the timed items' own τ and k̄ this is the
measured ratio of totals exactly, so the gap between prediction and measurement is the timed items' acceptance
against the run's; the parts say where a round's time goes (c = t_d / t₁, the share outside forwards), and
the same formula with other step times (a GPU's: `plan`) predicts another machine's speedup.
"""

from __future__ import annotations

from cactus_bench.core.intervals import Estimate, mean_interval, ratio_of_ratios
from cactus_bench.core.metrics.registry import COUNTERS, _ratio, relative_metric, sampled_metric

PARTS = tuple(k for k in COUNTERS if k.startswith("paired_"))  # the paired decode's counters, summed over items


def step_costs(samples: list[dict]) -> dict | None:
    """The cost model's parts from the timed samples that carry them, and τ, k̄ from every sample; None when
    no timed sample measured its parts (or the method drafts nothing)."""
    timed = [s["stats"] for s in samples if s["stats"].get("paired_method_draft_time") is not None]
    if not timed:
        return None
    t = {k: sum(s.get(k) or 0 for s in timed) for k in PARTS}
    calls = sum(s.get("verifier_calls") or 0 for s in (x["stats"] for x in samples))
    if not t["paired_method_drafted"] or not t["paired_method_calls"] or not t["paired_baseline_tokens"] or not calls:
        return None
    run_tokens = sum(x["stats"].get("new_tokens") or 0 for x in samples)
    run_drafted = sum(x["stats"].get("drafted") or 0 for x in samples)
    method_rounds = t["paired_method_time"] - t["paired_method_prefill_time"]
    outside = method_rounds - t["paired_method_draft_time"] - t["paired_method_verify_time"]
    base_steps = t["paired_baseline_time"] - t["paired_baseline_prefill_time"]
    return {
        "t_d": t["paired_method_draft_time"] / t["paired_method_drafted"],
        "t_round_verify": t["paired_method_verify_time"] / t["paired_method_calls"],
        "t_1": t["paired_baseline_verify_time"] / t["paired_baseline_tokens"],
        "outside": outside / t["paired_method_calls"],
        "outside_1": (base_steps - t["paired_baseline_verify_time"]) / t["paired_baseline_tokens"],
        "outside_share": _ratio(outside, method_rounds),
        "tau": run_tokens / calls,
        "drafts_per_call": run_drafted / calls,
        **{k: t[k] for k in ("paired_method_tokens", "paired_baseline_tokens")},
        "prefill": t["paired_method_prefill_time"],
        "prefill_1": t["paired_baseline_prefill_time"],
    }


def predict(
    c: dict,
    t_d: float | None = None,
    t_round_verify: float | None = None,
    t_1: float | None = None,
    outside: float | None = None,
    outside_1: float | None = None,
    prefill: bool = True,
) -> float:
    """The speedup the model predicts from these step costs (each defaulting to the measured one) and the
    run's acceptance profile; `prefill=False`: per token, leaving prefill out (a long reply's limit)."""
    t_d, t_v, t_1 = (
        c[k] if v is None else v for k, v in (("t_d", t_d), ("t_round_verify", t_round_verify), ("t_1", t_1))
    )
    o, o_1 = (c[k] if v is None else v for k, v in (("outside", outside), ("outside_1", outside_1)))
    base = (t_1 + o_1) * c["paired_baseline_tokens"] + (c["prefill_1"] if prefill else 0.0)
    rounds = c["paired_method_tokens"] / c["tau"]
    method = rounds * (c["drafts_per_call"] * t_d + t_v + o) + (c["prefill"] if prefill else 0.0)
    return base / method


@sampled_metric("speedup (predicted, cost model)", "{:.2f}×", cli=True, timed=True, better="higher")
def predicted_speedup(samples: list[dict]) -> float | None:
    """The speedup over the verifier alone that the cost model predicts from the timed sample's step costs and
    the run's acceptance profile (the module's formula), to read beside the measured paired speedup."""
    c = step_costs(samples)
    return predict(c) if c is not None else None


def _part(samples: list[dict], name: str, scale: float = 1.0) -> float | None:
    c = step_costs(samples)
    return None if c is None or c[name] is None else c[name] * scale


@sampled_metric("t_d (ms)", "{:.3g}", timed=True, better="lower")
def draft_step_ms(samples: list[dict]) -> float | None:
    """The drafter's time per draft made (its forward and the draft's sampling), in the timed decodes."""
    return _part(samples, "t_d", 1e3)


@sampled_metric("t₁ (ms)", "{:.3g}", timed=True, better="lower")
def verify_1_ms(samples: list[dict]) -> float | None:
    """The verifier alone's time per token (its one-token forward and sampling), in the timed decodes."""
    return _part(samples, "t_1", 1e3)


@sampled_metric("t_{m+1} (ms)", "{:.3g}", timed=True, better="lower")
def verify_round_ms(samples: list[dict]) -> float | None:
    """The verifier's time per round (its forward over the drafts and the last token, and warping q)."""
    return _part(samples, "t_round_verify", 1e3)


@sampled_metric("outside forwards (share of a round)", "{:.0%}", cli=True, timed=True, better="lower")
def outside_share(samples: list[dict]) -> float | None:
    """The share of the method's rounds spent outside model forwards (the rule, statistics, bookkeeping)."""
    return _part(samples, "outside_share")


@sampled_metric("c = t_d / t₁", "{:.2f}", cli=True, timed=True, better="lower")
def cost_ratio(samples: list[dict]) -> float | None:
    """What a draft costs in verifier steps: the drafter's time per draft over the verifier alone's per token
    (the paper's pairs: about 0.05-0.1)."""
    c = step_costs(samples)
    return _ratio(c["t_d"], c["t_1"]) if c is not None else None


@sampled_metric("speedup (paired, mean of items)", "{:.2f}×", timed=True, better="higher")
def item_paired_speedup(samples: list[dict]) -> Estimate | None:
    """The mean over timed items of each item's own speedup (its verifier-alone time / its method time), with
    a 95 % t interval over items: a short item weighs as much as a long one (the ratio of totals,
    `paired_speedup`, weighs items by their time)."""
    ratios = [
        s["stats"]["paired_baseline_time"] / s["stats"]["paired_method_time"]
        for s in samples
        if s["stats"].get("paired_method_time") and s["stats"].get("paired_baseline_time") is not None
    ]
    return mean_interval(ratios, (0.0, float("inf"))) if ratios else None


@relative_metric("speedup vs SpS (paired)", reference="sps", fmt="{:.2f}×", timed=True, paired=True, better="higher")
def paired_speedup_vs_sps(samples: list[dict], sps_samples: list[dict]) -> Estimate | None:
    """This run's paired speedup over SpS's, on the items both timed: (Σ T_verifier / Σ T_method) /
    (Σ T_verifier' / Σ T_SpS), each run against its own verifier-alone decodes of the same items (so the load
    of each moment cancels), with the jackknife interval over items (`ratio_of_ratios`)."""
    ref = {s["id"]: s["stats"] for s in sps_samples if s["stats"].get("paired_method_time")}
    keys = ("paired_baseline_time", "paired_method_time")
    items = [
        (*(s["stats"][k] for k in keys), *(ref[s["id"]][k] for k in keys))
        for s in samples
        if s["id"] in ref and s["stats"].get("paired_method_time")
    ]
    return ratio_of_ratios(items) if items else None

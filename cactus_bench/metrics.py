"""Run metrics (methods.md §4) from per-sample decode statistics. Core: plain Python, no dependencies.

Each sample's `stats` is `GenerationOutput.summary()`: new_tokens, verifier_calls, drafted, accepted,
rejected, kl_sum, kl_count, wall_time. Totals are pooled over samples (AL = all accepted drafts / all
verifier calls), as the paper's AL_m is a mean over all verifier calls of a run.
"""

from __future__ import annotations


def _total(samples: list[dict], key: str) -> float:
    return sum(s["stats"][key] or 0 for s in samples)


def rejections_per_token(samples: list[dict]) -> float | None:
    """r = Σ(drafted − accepted) / Σ emitted: the quantity Rej compares."""
    emitted = _total(samples, "new_tokens")
    return _total(samples, "rejected") / emitted if emitted else None


def decode_metrics(samples: list[dict]) -> dict:
    """AL, τ, acceptance rate, realised KL, rejections per token, throughput and whole-task time."""
    calls, tokens, wall = _total(samples, "verifier_calls"), _total(samples, "new_tokens"), _total(samples, "wall_time")
    drafted, accepted = _total(samples, "drafted"), _total(samples, "accepted")
    kl_n = _total(samples, "kl_count")
    has_kl = any(s["stats"].get("kl_sum") is not None for s in samples)
    return {
        "samples": len(samples),
        "new_tokens": tokens,
        "verifier_calls": calls,
        "accepted_length": accepted / calls if calls else None,
        "tau": tokens / calls if calls else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "realised_kl": _total(samples, "kl_sum") / kl_n if (has_kl and kl_n) else None,
        "rejected_per_token": rejections_per_token(samples),
        "tokens_per_s": tokens / wall if wall else None,
        "wall_time": wall,
    }


def rej(method_samples: list[dict], sps_samples: list[dict]) -> float | None:
    """Rej (%): relative change of rejected drafts per emitted token vs SpS; negative is better."""
    r, r_sps = rejections_per_token(method_samples), rejections_per_token(sps_samples)
    if r is None or not r_sps:
        return None
    return 100.0 * (r / r_sps - 1.0)


def speedup(method_samples: list[dict], ar_samples: list[dict]) -> dict | None:
    """Wall-time speedup over the verifier alone on the samples both runs finished: throughput ratio
    (tokens/s) and the whole-task time ratio the paper reports."""
    ar = {s["id"]: s for s in ar_samples}
    common = [s for s in method_samples if s["id"] in ar]
    if not common:
        return None
    base = [ar[s["id"]] for s in common]
    tps = decode_metrics(common)["tokens_per_s"]
    tps_ar = decode_metrics(base)["tokens_per_s"]
    return {"throughput": tps / tps_ar if tps and tps_ar else None,
            "task_time": _total(base, "wall_time") / _total(common, "wall_time"), "common_samples": len(common)}


ADDITIVE = ("new_tokens", "verifier_calls", "drafted", "accepted", "rejected", "kl_sum", "kl_count", "wall_time",
            "prefill_time", "t_draft", "t_verify", "t_rule", "t_other")


def add_stats(parts: list[dict]) -> dict:
    """Sum the additive fields of several generations' statistics (e.g. the turns of a conversation)."""
    out = {}
    for key in ADDITIVE:
        values = [p.get(key) for p in parts]
        out[key] = None if all(v is None for v in values) else sum(v or 0 for v in values)
    return out

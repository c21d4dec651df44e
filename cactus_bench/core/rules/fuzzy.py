"""Fuzzy speculative decoding (Holsman, Huang, Dhingra 2025; "r-fuzzy" in Xia et al. 2026 Eq. 10): where the
divergence between the two warped distributions at a position is under a threshold T, the draft is accepted
unconditionally; elsewhere the standard test runs. As a target rule: h = p where D(p, q) < T, else q.

D is the Jensen-Shannon divergence in nats (Holsman et al.'s choice; bounded by ln 2) or the total variation
(`divergence="tv"`). T = 0 is SpS (D ≥ 0).
"""

import torch

from cactus_bench.core.rules.base import TargetRule, check_range, gather_last, general_accept
from cactus_bench.core.rules.registry import register

DIVERGENCES = ("jsd", "tv")


def jensen_shannon(p, q):
    """JSD(p, q) in nats over the last axis [..., 1], clamped at 0 (round-off must not pass T = 0)."""
    m = 0.5 * (p + q)
    xlogx = torch.special.xlogy
    jsd = 0.5 * (xlogx(p, p) + xlogx(q, q)).sum(-1, keepdim=True) - xlogx(m, m).sum(-1, keepdim=True)
    return jsd.clamp(min=0)


@register("fuzzy")
class Fuzzy(TargetRule):
    label = "Fuzzy SD"
    sps_knob = {"threshold": 0.0}
    timed_variants = tuple({"divergence": d} for d in DIVERGENCES)

    def __init__(self, threshold: float = 0.3, divergence: str = "jsd"):
        if divergence not in DIVERGENCES:
            raise ValueError(f"fuzzy: divergence must be one of {DIVERGENCES}; got {divergence!r}")
        self.threshold = check_range(self.name, "threshold", threshold, 0.0)
        self.divergence = divergence

    def close(self, p, q):
        """Where the drafter is trusted: D(p, q) < T, [..., 1]."""
        d = jensen_shannon(p, q) if self.divergence == "jsd" else 0.5 * (p - q).abs().sum(-1, keepdim=True)
        return d < self.threshold

    def target(self, p, q, n, **raw):
        return torch.where(self.close(p, q), p, q)

    def accept_prob(self, p, q, n, **raw):  # h_n / p_n is 1 where h = p: no need to build h
        return torch.where(self.close(p, q).squeeze(-1), 1.0, general_accept(gather_last(q, n), gather_last(p, n)))

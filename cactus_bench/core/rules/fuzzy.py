"""Fuzzy speculative decoding (Holsman, Huang, Dhingra 2025; "r-fuzzy" in Xia et al. 2026 Eq. 10): where the
divergence between the two warped distributions at a position is under a threshold T, the draft is accepted
unconditionally; elsewhere the standard test runs. As a target rule: h = p where D(p, q) < T, else q.

D is the Jensen-Shannon divergence in nats (Holsman et al.'s choice; bounded by ln 2) or the total variation
(`divergence="tv"`). T = 0 is SpS (D ≥ 0).
"""

import torch

from cactus_bench.core.rules.base import TargetRule, check_range, gather_last, general_accept, xlogx
from cactus_bench.core.rules.registry import register

DIVERGENCES = ("jsd", "tv")


def jensen_shannon(p, q):
    """JSD(p, q) in nats over the last axis [..., 1], clamped at 0 (round-off must not pass T = 0)."""
    jsd = (0.5 * (xlogx(p) + xlogx(q)) - xlogx(0.5 * (p + q))).sum(-1, keepdim=True)
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

    def prepare(self, p, q, n, **raw):
        """The divergence test once per `verify`, shared by the test, the recovery and the target KL."""
        return {"close": self.close(p, q).squeeze(-1)}

    def target(self, p, q, n, close=None, **raw):
        close = self.close(p, q) if close is None else close.unsqueeze(-1)
        return torch.where(close, p, q)

    def accept_prob(self, p, q, n, close=None, **raw):  # h_n / p_n is 1 where h = p: no need to build h
        close = self.close(p, q).squeeze(-1) if close is None else close
        return torch.where(close, 1.0, general_accept(gather_last(q, n), gather_last(p, n)))

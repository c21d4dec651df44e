"""Interpolation: target h = α·p + (1 − α)·q, then the general identity. α = 0 is SpS, α = 1 accepts all."""

from cactus_bench.core.rules.base import TargetRule, check_range, gather_last, general_accept
from cactus_bench.core.rules.registry import register


@register("interp")
class Interp(TargetRule):
    label = "Interpolation"
    sps_knob = {"alpha": 0.0}

    def __init__(self, alpha: float = 0.9):
        self.alpha = check_range(self.name, "alpha", alpha, 0.0, 1.0)

    def target(self, p, q, n, **raw):
        return self.alpha * p + (1 - self.alpha) * q

    def accept_prob(self, p, q, n, **raw):  # h_n needs only p_n and q_n
        p_n = gather_last(p, n)
        return general_accept(self.alpha * p_n + (1 - self.alpha) * gather_last(q, n), p_n)

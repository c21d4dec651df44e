"""Lenience (Leviathan, Kalman, Matias 2023, App. A.5, their lossy variant): the drafted token's ratio is
read against a lenience factor l ∈ [0, 1]:

accept min(1, q_n / (l·p_n));  recover from (q − l·p)+.
l = 1 is SpS; l = 0 accepts every draft. It is Mentored decoding's family with β = l held fixed instead of
searched per position for a divergence budget (`mentored`); Xia et al. 2026 call it mentored-dec with
α = 1 − l.
"""

import torch

from cactus_bench.core.rules.base import Rule, check_range, gather_last
from cactus_bench.core.rules.registry import register


@register("lenience")
class Lenience(Rule):
    label = "Lenience"
    sps_knob = {"lenience": 1.0}

    def __init__(self, lenience: float = 0.5):
        self.lenience = check_range(self.name, "lenience", lenience, 0.0, 1.0)

    def accept_prob(self, p, q, n, **raw):
        q_n, scaled = gather_last(q, n), self.lenience * gather_last(p, n)
        return torch.where(q_n >= scaled, 1.0, q_n / scaled)  # l = 0: q_n >= 0, never 0 / 0

    def residual(self, p, q, n, **raw):
        return (q - self.lenience * p).clamp(min=0)

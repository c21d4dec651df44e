"""Approximate speculative decoding (Feng et al. 2026): a draft the standard test rejects is still accepted
when its regret against the verifier's greedy choice is low, log max q − log q_n ≤ ε (nats), while the
round's budget of such acceptances lasts:

position j passes iff u_j < min(1, q_n / p_n), or n is low-regret and fewer than B earlier drafts of the
round were accepted only for their low regret. Rejection recovers from (q − p)+.
The budget is spent within a round (it is state across a round's positions, carried by `tests` inside the
one verification, so the engines carry nothing between rounds). `accept_prob` and the exact law are the
first position's, with the whole budget; B = 0 is SpS.
"""

import math

import torch

from cactus_bench.core.rules.base import Rule, check_range, gather_last, general_accept
from cactus_bench.core.rules.registry import register


@register("approximate")
class Approximate(Rule):
    label = "Approx. SD"
    sps_knob = {"budget": 0}

    def __init__(self, max_regret: float = 1.0, budget: int = 1):
        self.max_regret = check_range(self.name, "max_regret", max_regret, 0.0)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"approximate: budget must be an integer >= 0; got {budget!r}")
        self.budget = budget

    def low_regret(self, q, q_n):
        return (q_n >= q.amax(-1) * math.exp(-self.max_regret)) & (q_n > 0)

    def accept_prob(self, p, q, n, **raw):
        q_n = gather_last(q, n)
        standard = general_accept(q_n, gather_last(p, n))
        return torch.where(self.low_regret(q, q_n) & (self.budget > 0), 1.0, standard)

    def tests(self, u, p, q, n, **raw):
        q_n = gather_last(q, n)
        standard = u < general_accept(q_n, gather_last(p, n))
        low = self.low_regret(q, q_n)
        spent = (low & ~standard).long()
        return standard | (low & (spent.cumsum(-1) - spent < self.budget))

    def residual(self, p, q, n, **raw):
        return (q - p).clamp(min=0)

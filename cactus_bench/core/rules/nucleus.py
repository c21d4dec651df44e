"""Nucleus speculative decoding (Li et al. 2026): a draft is accepted when the standard test passes or when
it lies in the verifier's top-p nucleus N_ρ(q), the tokens q ranks before its cumulative mass reaches ρ:

accept 1 if n ∈ N_ρ(q) else min(1, q_n / p_n);  recover from (q − p)+ (the standard residual).
n ∈ N_ρ(q) iff q_n > 0 and the mass q puts on tokens strictly above q_n is < ρ (tokens tied with q_n are in
or out together; no sort over the vocabulary). q is the warped verifier distribution. ρ = 0 is SpS.
"""

import torch

from cactus_bench.core.rules.base import Rule, check_range, gather_last, general_accept
from cactus_bench.core.rules.registry import register


@register("nucleus")
class Nucleus(Rule):
    label = "Nucleus SD"
    sps_knob = {"top_p": 0.0}

    def __init__(self, top_p: float = 0.5):
        self.top_p = check_range(self.name, "top_p", top_p, 0.0, 1.0)

    def in_nucleus(self, q, q_n):
        above = torch.where(q > q_n.unsqueeze(-1), q, 0.0).sum(-1)
        return (above < self.top_p) & (q_n > 0)

    def accept_prob(self, p, q, n, **raw):
        q_n = gather_last(q, n)
        return torch.where(self.in_nucleus(q, q_n), 1.0, general_accept(q_n, gather_last(p, n)))

    def residual(self, p, q, n, **raw):
        return (q - p).clamp(min=0)

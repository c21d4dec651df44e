"""Mentored decoding (Tran-Thien 2023, "An optimal lossy variant of speculative decoding").

Maximise acceptance subject to KL(P_out ‖ q) ≤ D. Solution family: accept min(1, q_n/(β·p_n)), recover
from (q − β·p)+, β ∈ (0, 1] (β = 1 is SpS). Per position the smallest β whose exact law meets the budget,
found by bisection. The law does not depend on the drafted token:
P_out = min(p, q/β) + (1 − Σ min(p, q/β))·(q − βp)+ / Σ(q − βp)+.
"""

import torch

from cactus_bench.core.rules.base import Rule, bisect_steps, check_range, gather_last, general_accept, kl
from cactus_bench.core.rules.registry import register


def mentored_law(p, q, beta):
    b = beta.unsqueeze(-1)
    accepted = torch.minimum(p, q / b)
    res = (q - b * p).clamp(min=0)
    z = res.sum(-1, keepdim=True)
    rec = torch.where(z > 0, res / torch.where(z > 0, z, torch.ones_like(z)), q)
    return accepted + (1 - accepted.sum(-1, keepdim=True)) * rec


@register("mentored")
class Mentored(Rule):
    label = "Mentored"

    def __init__(self, divergence: float = 0.1):
        self.divergence = check_range(self.name, "divergence", divergence, 0.0)

    def beta(self, p, q):
        """Smallest β in (0, 1] with KL(P_out ‖ q) ≤ D; bisection keeps the end that meets the budget."""
        shape = p.shape[:-1]
        lo = torch.zeros(shape, dtype=p.dtype, device=p.device)
        hi = torch.ones(shape, dtype=p.dtype, device=p.device)
        for _ in range(bisect_steps(p.dtype)):  # β to the dtype's resolution
            mid = (lo + hi) / 2
            ok = kl(mentored_law(p, q, mid), q) <= self.divergence
            hi = torch.where(ok, mid, hi)
            lo = torch.where(ok, lo, mid)
        return hi

    def prepare(self, p, q, n, **raw):
        return {"beta": self.beta(p, q)}  # one bisection per position, shared by the three functions below

    def _beta(self, p, q, prepared):
        return self.beta(p, q) if prepared is None else prepared

    def accept_prob(self, p, q, n, beta=None, **raw):
        return general_accept(gather_last(q, n) / self._beta(p, q, beta), gather_last(p, n))

    def residual(self, p, q, n, beta=None, **raw):
        return (q - self._beta(p, q, beta).unsqueeze(-1) * p).clamp(min=0)

    def target(self, p, q, n, beta=None, **raw):
        """The law this rule emits (it has no separate target): its target KL is its output KL."""
        return mentored_law(p, q, self._beta(p, q, beta))

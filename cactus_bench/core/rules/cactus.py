"""Cactus (Hao & Mou, ICLR 2026): raise only the drafted token's target mass to γ under KL(h‖q) ≤ δ.

h_n = γ,  h_i = q_i·(1 − γ)/(1 − q_n) for i ≠ n;  accept min(1, γ/p_n);  recover from (h − p)+.
`cactus` uses the paper's second-order Taylor γ; `cactus_exact` solves the binary-KL constraint exactly.
"""

import math

import torch
from torch import Tensor

from cactus_bench.core.rules.base import bisect_steps, check_range, gather_last, general_accept
from cactus_bench.core.rules.registry import register
from cactus_bench.core.rules.sps import TargetRule


def binary_kl(g: Tensor, qn: Tensor) -> Tensor:
    """KL(Bern(g) || Bern(qn)) with 0·log 0 = 0; equals KL(h‖q) for Cactus's h."""
    a = torch.where(g > 0, g * (torch.log(g) - torch.log(qn)), 0.0)
    b = torch.where(g < 1, (1 - g) * (torch.log1p(-g) - torch.log1p(-qn)), 0.0)
    return a + b


@register("cactus")
class Cactus(TargetRule):
    label = "Cactus"

    def __init__(self, delta: float = 1.0):
        self.delta = check_range(self.name, "delta", delta, 0.0)

    def gamma(self, qn: Tensor) -> Tensor:
        return torch.clamp(qn + torch.sqrt(2 * self.delta * qn * (1 - qn)), max=1.0)

    def prepare(self, p, q, n, **raw):
        """q_n and γ at each drafted token, once per `verify` for the test, the recovery and the target KL."""
        if n is None:  # the exact laws: every candidate draft has its own, computed where needed
            return {}
        qn = gather_last(q, n)
        return {"qn": qn, "gamma": self.gamma(qn)}

    def _gamma(self, q, n, qn=None, gamma=None) -> tuple[Tensor, Tensor]:
        qn = gather_last(q, n) if qn is None else qn
        return qn, self.gamma(qn) if gamma is None else gamma

    def target(self, p, q, n, gamma=None, qn=None, **raw):
        qn, g = self._gamma(q, n, qn, gamma)
        # 0/0 when q_n = 1 (then γ = 1 and h = q): the official code maps NaN to 1
        scale = torch.nan_to_num((1 - g) / (1 - qn), nan=1.0, posinf=math.inf, neginf=-math.inf)
        h = q * scale.unsqueeze(-1)
        return h.scatter(-1, n.unsqueeze(-1), g.unsqueeze(-1))

    def accept_prob(self, p, q, n, gamma=None, qn=None, **raw):  # only γ = h_n is needed for the test
        return general_accept(self._gamma(q, n, qn, gamma)[1], gather_last(p, n))

    def target_kl(self, p, q, n, gamma=None, qn=None, **raw):
        return binary_kl(*self._gamma(q, n, qn, gamma)[::-1])


@register("cactus_exact")
class CactusExact(Cactus):
    """γ = the root on [q_n, 1] of binary_kl(γ, q_n) = δ (bisection; binary_kl is increasing there).

    Bisection keeps the lower end, so KL(h‖q) ≤ δ holds exactly, not just to round-off."""

    label = "Cactus (exact γ)"

    def prepare(self, p, q, n, **raw):
        if n is None:
            return {}
        qn = gather_last(q, n)
        return {"qn": qn, "gamma": self.gamma(qn)}  # one bisection per round, shared by test and target

    def prepare_laws(self, p, q, **raw):
        return {"gamma": self.gamma(q)}  # γ of every candidate draft n at once: one bisection over [..., S]

    def gamma(self, qn: Tensor) -> Tensor:
        lo, hi = qn.clone(), torch.ones_like(qn)
        for _ in range(bisect_steps(qn.dtype)):  # halves [q_n, 1] below the dtype's resolution
            mid = (lo + hi) / 2
            ok = binary_kl(mid, qn) <= self.delta
            lo = torch.where(ok, mid, lo)
            hi = torch.where(ok, hi, mid)
        # γ = 1 when even full mass on n costs at most δ nats (−log q_n ≤ δ); q_n = 0 keeps γ = 0.
        full = -torch.log(qn) <= self.delta
        return torch.where(full, torch.ones_like(qn), lo)

"""Cactus (Hao & Mou, ICLR 2026): raise only the drafted token's target mass to γ under KL(h‖q) ≤ δ.

h_n = γ,  h_i = q_i·(1 − γ)/(1 − q_n) for i ≠ n;  accept min(1, γ/p_n);  recover from (h − p)+.
`cactus` uses the paper's second-order Taylor γ; `cactus_exact` solves the binary-KL constraint exactly.
"""

import math

import torch
from torch import Tensor

from cactus_bench.core.rules.base import TargetRule, check_range, constant, gather_last, general_accept
from cactus_bench.core.rules.registry import register


def binary_kl(g: Tensor, qn: Tensor) -> Tensor:
    """KL(Bern(g) || Bern(qn)) with 0·log 0 = 0; equals KL(h‖q) for Cactus's h."""
    a = torch.where(g > 0, g * (torch.log(g) - torch.log(qn)), 0.0)
    b = torch.where(g < 1, (1 - g) * (torch.log1p(-g) - torch.log1p(-qn)), 0.0)
    return a + b


@register("cactus")
class Cactus(TargetRule):
    label = "Cactus"
    sps_knob = {"delta": 0.0}  # γ = q_n: h = q

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
    """γ = the root on [q_n, 1] of binary_kl(γ, q_n) = δ, in a fixed number of ops whatever the batch.

    Newton's step on f(γ) = binary_kl(γ, q_n) − δ has a closed form: with d = logit(γ) − logit(q_n) = f′(γ),
    f = γ·d + log(1 − γ) − log(1 − q_n) − δ, so γ − f/d = (δ + log(1 − q_n) − log(1 − γ)) / d. f is convex and
    increasing on [q_n, 1], so from the Taylor γ (left of the root where q_n < 1/2) the first step lands right
    of the root and the rest descend to it: `newton_steps` reach round-off for every q_n and δ tested (1e-300
    to 1, 1e-8 to 50). A last step keeps KL(h‖q) ≤ δ exact, not just to round-off: of γ's gap to q_n shrunk
    by each factor of `ladder` (1, then 1 − 2⁻⁴⁸, 1 − 2⁻⁴⁰, ... on float64), the largest whose binary_kl,
    computed as `target_kl` computes it, is within δ (else q_n, whose KL is 0). About 80 ops, where bisection
    took 25-54 steps of ~18 (docs/gpu.md)."""

    label = "Cactus (exact γ)"

    def prepare(self, p, q, n, **raw):
        if n is None:
            return {}
        qn = gather_last(q, n)
        return {"qn": qn, "gamma": self.gamma(qn)}  # one search per round, shared by test and target

    def prepare_laws(self, p, q, **raw):
        return {"gamma": self.gamma(q)}  # γ of every candidate draft n at once: one search over [..., S]

    def gamma(self, qn: Tensor) -> Tensor:
        top = 1 - torch.finfo(qn.dtype).eps / 2  # the largest float below 1: log(1 − γ) stays finite
        log1m_qn = torch.log1p(-qn)
        log_qn = torch.log(qn)
        logit_qn = log_qn - log1m_qn
        c = log1m_qn + self.delta
        g = torch.clamp(super().gamma(qn), max=top)
        for _ in range(newton_steps(qn.dtype)):
            log1m_g = torch.log1p(-g)
            g = torch.clamp((c - log1m_g) / (torch.logit(g) - logit_qn), max=top)
        # within δ exactly: the largest of the gap's shrunk candidates that is. The gap is ≥ 0 (round-off at a
        # tiny δ can put γ a hair below q_n) and not NaN (from q_n = 0 or 1; binary_kl counts a NaN as within δ)
        qn_ = qn.unsqueeze(-1)
        gap = torch.nan_to_num(g - qn).clamp_(min=0).unsqueeze(-1)
        candidates = torch.addcmul(qn_, gap, ladder(qn.dtype, qn.device))
        g = torch.where(binary_kl(candidates, qn_) <= self.delta, candidates, qn_).amax(-1)
        # γ = 1 when even full mass on n costs at most δ nats (−log q_n ≤ δ); q_n = 0 keeps γ = 0.
        return torch.where(log_qn >= -self.delta, 1.0, g)


def newton_steps(dtype: torch.dtype) -> int:
    """Newton steps from the Taylor γ that reach the dtype's round-off (7 on float64, 5 on float32)."""
    return 7 if torch.finfo(dtype).eps < 1e-10 else 5


def ladder(dtype: torch.dtype, device: torch.device) -> Tensor:
    """The factors γ's gap to q_n is shrunk by until binary_kl is within δ: 1, then 1 − 2^-k from just above
    the dtype's resolution down (where δ is tiny, binary_kl's round-off is a larger share of it)."""
    bits = (48, 40, 32, 24, 16) if torch.finfo(dtype).eps < 1e-10 else (20, 16, 12, 8)
    return constant(
        ("ladder", dtype, device), lambda: torch.tensor([1.0] + [1 - 2.0**-k for k in bits], dtype=dtype, device=device)
    )

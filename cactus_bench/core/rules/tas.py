"""TAS — typical acceptance (Medusa, Cai et al. 2024; vLLM's typical acceptance sampler).

Deterministic: accept n iff q_n > min(ε, α·exp(−H(q))), H(q) = −Σ q log(q + 1e−5). p is unused.
Recovery: argmax q (the paper's baseline) or a sample from q.
"""

import math

import torch
import torch.nn.functional as F

from cactus_bench.core.rules.base import Rule, check_range, gather_last
from cactus_bench.core.rules.registry import register

RECOVERIES = ("argmax", "sample")


@register("tas")
class TAS(Rule):
    label = "TAS"

    def __init__(self, epsilon: float = 0.09, alpha: float | None = None, recovery: str = "argmax"):
        self.epsilon = check_range(self.name, "epsilon", epsilon, 0.0, 1.0)
        # The official code ties α to ε: α = sqrt(ε).
        self.alpha = math.sqrt(self.epsilon) if alpha is None else check_range(self.name, "alpha", alpha, 0.0)
        if recovery not in RECOVERIES:
            raise ValueError(f"tas: recovery must be one of {RECOVERIES}; got {recovery!r}")
        self.recovery = recovery

    def accept_prob(self, p, q, n, **raw):
        entropy = -(q * torch.log(q + 1e-5)).sum(-1)
        threshold = torch.clamp(self.alpha * torch.exp(-entropy), max=self.epsilon)
        return (gather_last(q, n) > threshold).to(q.dtype)

    def residual(self, p, q, n, **raw):
        if self.recovery == "sample":
            return q
        return F.one_hot(q.argmax(-1), q.shape[-1]).to(q.dtype)

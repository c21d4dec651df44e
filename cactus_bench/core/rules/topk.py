"""Top-k acceptance (the authors' `cactus/topk.py`): accept n iff q_n ≥ τ_k, the k-th largest entry of the
warped q (ties accepted), and nothing else. When q has fewer than k tokens in its support (common after
top-k 20 / top-p 0.95 at T = 0.6) τ_k = 0 and every draft is accepted, even one q gives no mass.

Recovery: ∝ max(1[q ≥ τ_k] − p, 0). `require_support=True` also demands q_n > 0 (a guard the authors do
not have, kept as a named option).
"""

import torch

from cactus_bench.core.rules.base import Rule, gather_last
from cactus_bench.core.rules.registry import register


@register("topk")
class TopK(Rule):
    label = "top-k"

    def __init__(self, k: int = 5, require_support: bool = False):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"topk: k must be an integer >= 1; got {k!r}")
        if not isinstance(require_support, bool):
            raise ValueError(f"topk: require_support must be true or false; got {require_support!r}")
        self.k = k
        self.require_support = require_support

    def _in_topk(self, q):
        k = min(self.k, q.shape[-1])
        tau = torch.topk(q, k, dim=-1).values[..., -1:]
        inside = q >= tau
        return inside & (q > 0) if self.require_support else inside

    def accept_prob(self, p, q, n, **raw):
        return gather_last(self._in_topk(q), n).to(q.dtype)

    def residual(self, p, q, n, **raw):
        return (self._in_topk(q).to(q.dtype) - p).clamp(min=0)

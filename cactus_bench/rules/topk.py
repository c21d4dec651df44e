"""Top-k acceptance: accept n iff q_n is among the k largest entries of q (ties accepted).

Recovery (official code): ∝ max(1[q ≥ τ_k] − p, 0), with τ_k the k-th largest entry of q. A token the
verifier gives zero probability is never accepted, so with a one-hot (greedy) q the rule is exact match.
"""

import torch

from .base import Rule, gather_last
from .registry import register


@register("topk")
class TopK(Rule):
    def __init__(self, k: int = 5):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"topk: k must be an integer >= 1; got {k!r}")
        self.k = k

    def _in_topk(self, q):
        k = min(self.k, q.shape[-1])
        tau = torch.topk(q, k, dim=-1).values[..., -1:]
        return (q >= tau) & (q > 0)

    def accept_prob(self, p, q, n, **raw):
        return gather_last(self._in_topk(q), n).to(q.dtype)

    def residual(self, p, q, n, **raw):
        return (self._in_topk(q).to(q.dtype) - p).clamp(min=0)

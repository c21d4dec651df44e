"""Sampling warpers shared by both models (methods.md §2): temperature, then top-k, then top-p, in float32.

Semantics match transformers' TemperatureLogitsWarper / TopKLogitsWarper / TopPLogitsWarper (ties at the
k-th logit kept; top-p keeps the smallest head of mass ≥ top_p, at least one token), so our loop and HF
`generate` sample from the same distributions. Temperature 0 means greedy: a one-hot on the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Warper:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0; got {self.temperature}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off); got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1]; got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def __call__(self, logits: Tensor) -> Tensor:
        """Logits [..., V] -> warped probabilities [..., V] (float32)."""
        logits = logits.float()
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        logits = logits / self.temperature
        if self.top_k and self.top_k < logits.shape[-1]:
            # Top-k first: top-p then only needs the k survivors, already sorted.
            vals, idx = torch.topk(logits, self.top_k, dim=-1)
            kth = vals[..., -1:]
            if self.top_p < 1.0:
                vals = _top_p_sorted_desc(vals, self.top_p)
            out = torch.full_like(logits, float("-inf"))
            out.scatter_(-1, idx, vals)
            # Ties with the k-th logit outside topk's pick are kept, as in HF (`logits < kth` removed).
            ties = (logits == kth) & torch.isinf(out)
            if self.top_p >= 1.0:
                out = torch.where(ties, logits, out)
            return torch.softmax(out, -1)
        if self.top_p < 1.0:
            vals, idx = torch.sort(logits, dim=-1, descending=True)
            out = torch.empty_like(logits).scatter_(-1, idx, _top_p_sorted_desc(vals, self.top_p))
            return torch.softmax(out, -1)
        return torch.softmax(logits, -1)


def _top_p_sorted_desc(vals: Tensor, top_p: float) -> Tensor:
    """Mask (to -inf) the tail of descending-sorted logits outside the top-p nucleus.

    HF's rule on the ascending order: drop tokens whose cumulative mass is <= 1 - top_p, keep >= 1 token.
    """
    asc = torch.flip(vals, dims=[-1])
    cum = torch.softmax(asc, -1).cumsum(-1)
    drop = cum <= (1 - top_p)
    drop[..., -1] = False
    return torch.flip(asc.masked_fill(drop, float("-inf")), dims=[-1])

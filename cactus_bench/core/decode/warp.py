"""Sampling warpers shared by both models (methods.md §2): temperature, then top-k, then top-p, in float32.

Semantics match transformers' TemperatureLogitsWarper / TopKLogitsWarper / TopPLogitsWarper and vLLM's
sampler (every logit tied with the k-th kept, then top-p over what is left: the smallest head of mass
≥ top_p, at least one token), so our loop, HF `generate` and vLLM sample from the same distributions.
Where logits tie exactly at the nucleus's edge (bf16 logits often do), the authors' sampler (vLLM V0) sorts
ascending and drops from the low end; its sort is not stable, so which of the tied tokens goes is left to
the kernel. Ours is stable: tied tokens are dropped in token-id order (the lower id first), the same on
every device and at every batch size. Temperature 0 means greedy: a one-hot on the argmax.
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
        if logits.dtype != torch.float32:  # `.float()` and `/ 1.0` are ops even when they change nothing
            logits = logits.float()
        if self.greedy:
            top = logits.argmax(-1, keepdim=True)  # a NaN or +inf logit is the argmax, so its value is read here
            # + 0 × that logit: the same one-hot when it is finite, all NaN when not (as a softmax of it would be)
            return torch.zeros_like(logits).scatter_(-1, top, 1.0) + 0.0 * logits.gather(-1, top)
        if self.temperature != 1.0:
            logits = logits / self.temperature
        V = logits.shape[-1]
        if self.top_k and self.top_k < V:
            if self.top_p < 1.0 and V < SORT_BELOW:  # a small vocabulary: one sort costs less than the passes
                kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
                return torch.softmax(_top_p(logits.masked_fill(logits < kth, float("-inf")), self.top_p), -1)
            return torch.softmax(_top_k_top_p(logits, self.top_k, self.top_p), -1)
        if self.top_p < 1.0:
            logits = _top_p(logits, self.top_p)
        return torch.softmax(logits, -1)


SORT_BELOW = 8192  # vocabularies this small sort at once; larger ones sort top-k's picks only (same law)


def _top_p(logits: Tensor, top_p: float) -> Tensor:
    """Mask (to -inf) the logits outside the top-p nucleus as transformers and vLLM do it: sort ascending,
    drop tokens whose cumulative mass is <= 1 - top_p, keep at least one; the sort is stable (ties: the
    lower id first, so dropped first)."""
    asc, idx = torch.sort(logits, dim=-1, descending=False, stable=True)
    drop = torch.softmax(asc, -1).cumsum(-1) <= (1 - top_p)
    drop[..., -1] = False
    return logits.masked_fill(drop.scatter(-1, idx, drop), float("-inf"))


def _top_k_top_p(logits: Tensor, k: int, top_p: float) -> Tensor:
    """Top-k (every logit tied with the k-th kept), then `_top_p` over what it kept, without sorting the
    vocabulary: at most k - 1 kept tokens lie strictly above the k-th logit (all among top-k's picks: k values
    to sort); the rest are tied with it and come first in the ascending order, in token-id order, so their
    running mass is a cumulative sum over the vocabulary in id order."""
    top = torch.topk(logits, k, dim=-1)
    kth = top.values[..., -1:]
    logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p >= 1.0:
        return logits
    probs = torch.softmax(logits, -1)
    limit = 1 - top_p
    tied = logits == kth
    tied_mass = (probs * tied).cumsum(-1)  # running mass of the tied tokens, in id order
    ids = torch.sort(top.indices, dim=-1).values  # top-k's picks in id order, then stably by value
    asc, order = torch.sort(logits.gather(-1, ids), dim=-1, stable=True)
    ids = ids.gather(-1, order)
    above = asc > kth
    above_mass = tied_mass[..., -1:] + (probs.gather(-1, ids) * above).cumsum(-1)
    drop_above = above & (above_mass <= limit)
    drop_above[..., -1] = False  # the largest token always stays
    drop = torch.zeros_like(tied).scatter(-1, ids, drop_above)
    # tied tokens: dropped while their running mass is <= limit; if none lies above, the last tied one stays
    last_tied = tied & (tied.long().cumsum(-1) == tied.sum(-1, keepdim=True)) & ~above[..., -1:]
    drop |= tied & (tied_mass <= limit) & ~last_tied
    return logits.masked_fill(drop, float("-inf"))

"""Sampling warpers shared by both models (methods.md §2): temperature, then top-k, then top-p, in float32.

Semantics match transformers' TemperatureLogitsWarper / TopKLogitsWarper / TopPLogitsWarper and vLLM's
sampler (every logit tied with the k-th kept, then top-p over what is left: the smallest head of mass
≥ top_p, at least one token), so our loop, HF `generate` and vLLM sample from the same distributions.
Temperature 0 means greedy: a one-hot on the argmax.
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
            # Every logit tied with the k-th stays (HF's `logits < kth` removed, vLLM alike): bf16 ties often.
            kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:  # over what top-k kept, ties included
            logits = _top_p(logits, self.top_p)
        return torch.softmax(logits, -1)


def _top_p(logits: Tensor, top_p: float) -> Tensor:
    """Mask (to -inf) the logits outside the top-p nucleus, as transformers and vLLM do it: sort ascending,
    drop tokens whose cumulative mass is <= 1 - top_p, keep at least one (the same sort, so tied logits at
    the nucleus's edge are split the same way)."""
    asc, idx = torch.sort(logits, dim=-1, descending=False)
    drop = torch.softmax(asc, -1).cumsum(-1) <= (1 - top_p)
    drop[..., -1] = False
    return logits.masked_fill(drop.scatter(-1, idx, drop), float("-inf"))

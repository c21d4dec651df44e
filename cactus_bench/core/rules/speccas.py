"""SpecCas — speculative cascades (Narasimhan et al., ICLR 2025): a deferral rule defines a target π,
then lossless SpS runs towards π. Deferral confidences read un-tempered probabilities (p_raw, q_raw;
without them the warped p, q stand in).

token_v3: T = {v : q_raw(v) ≥ (1 − α)·max q_raw};  π = p·1[T] + (1 − Σ_T p)·q.
          (methods.md calls α = 0 SpS; under this formula T is then {argmax q_raw}, so π = q only when the
          drafter puts no mass there — the formula is implemented as written.)
opt:      π = p if max p_raw ≥ max q_raw − α·TV(p_raw, q_raw), else π = q.
Which variant and α the Cactus paper used is unknown; both are exposed (α ∈ [0, 1]).
"""

import torch

from cactus_bench.core.rules.base import check_range
from cactus_bench.core.rules.registry import register
from cactus_bench.core.rules.sps import TargetRule

VARIANTS = ("token_v3", "opt")


@register("speccas")
class SpecCas(TargetRule):
    label = "SpecCas"
    timed_variants = ({"variant": "token_v3"}, {"variant": "opt"})  # two kernels
    needs_raw = True

    def __init__(self, variant: str = "token_v3", alpha: float = 0.1):
        if variant not in VARIANTS:
            raise ValueError(f"speccas: variant must be one of {VARIANTS}; got {variant!r}")
        self.variant = variant
        self.alpha = check_range(self.name, "alpha", alpha, 0.0, 1.0)

    def target(self, p, q, n, p_raw=None, q_raw=None):
        p_raw = p if p_raw is None else p_raw
        q_raw = q if q_raw is None else q_raw
        if self.variant == "token_v3":
            in_t = (q_raw >= (1 - self.alpha) * q_raw.amax(-1, keepdim=True)).to(p.dtype)
            return p * in_t + (1 - (p * in_t).sum(-1, keepdim=True)) * q
        tv = 0.5 * (p_raw - q_raw).abs().sum(-1, keepdim=True)
        use_p = p_raw.amax(-1, keepdim=True) >= q_raw.amax(-1, keepdim=True) - self.alpha * tv
        return torch.where(use_p, p, q)

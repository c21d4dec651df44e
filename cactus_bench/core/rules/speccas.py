"""SpecCas — speculative cascades (Narasimhan et al., ICLR 2025): a deferral rule defines a target π, then
lossless SpS runs towards π. Deferral confidences read un-tempered probabilities (p_raw, q_raw; without them,
or with `confidence="warped"`, the warped p, q stand in).

token_v3: T = {v : q_raw(v) ≥ (1 − α)·max q_raw};  π = p·1[T] + (1 − Σ_T p)·q  (Xia et al. 2026 App. B
          Eq. 15 is this formula on the warped q: `confidence="warped"`).
The others trust the drafter wholesale (π = p) where their deferral test passes, else defer (π = q):
opt:      max p_raw ≥ max q_raw − α·TV(p_raw, q_raw)          (the paper's Lemma 3 plug-in)
diff:     max p_raw ≥ max q_raw − α                            (constant margin, their Eq. 5)
chow:     max p_raw ≥ 1 − α                                    (Chow's rule, their Eq. 2: q is not read)
entropy:  H(p_raw) ≤ H(q_raw) + α·TV(p_raw, q_raw), in nats    (the entropy plug-in of Lemma 4, App. C.2)
α = −inf is SpS for every variant (T is empty; no test passes). Which variant and α the Cactus paper used is
unknown; all are exposed.
"""

import math

import torch

from cactus_bench.core.rules.base import TargetRule, check_range, xlogx
from cactus_bench.core.rules.registry import register

# each variant's α range: where α reaches 1, token_v3 and chow already trust the drafter everywhere
ALPHA_MAX = {"token_v3": 1.0, "opt": math.inf, "diff": math.inf, "chow": 1.0, "entropy": math.inf}
VARIANTS = tuple(ALPHA_MAX)
CONFIDENCES = ("raw", "warped")


def entropy(x):
    return -xlogx(x).sum(-1, keepdim=True)


@register("speccas")
class SpecCas(TargetRule):
    label = "SpecCas"
    timed_variants = tuple({"variant": v} for v in VARIANTS)  # a kernel each
    sps_knob = {"alpha": -math.inf}

    def __init__(self, variant: str = "token_v3", alpha: float = 0.1, confidence: str = "raw"):
        if variant not in VARIANTS:
            raise ValueError(f"speccas: variant must be one of {VARIANTS}; got {variant!r}")
        if confidence not in CONFIDENCES:
            raise ValueError(f"speccas: confidence must be one of {CONFIDENCES}; got {confidence!r}")
        self.variant = variant
        self.alpha = check_range(self.name, "alpha", alpha, -math.inf, ALPHA_MAX[variant])
        self.confidence = confidence

    @property
    def needs_raw(self) -> bool:  # type: ignore[override]  # a setting decides it, not the class
        return self.confidence == "raw"

    def target(self, p, q, n, p_raw=None, q_raw=None):
        warped = self.confidence == "warped"
        p_raw = p if p_raw is None or warped else p_raw
        q_raw = q if q_raw is None or warped else q_raw
        if self.variant == "token_v3":
            in_t = (q_raw >= (1 - self.alpha) * q_raw.amax(-1, keepdim=True)).to(p.dtype)
            return p * in_t + (1 - (p * in_t).sum(-1, keepdim=True)) * q
        return torch.where(self._trusts_drafter(p_raw, q_raw), p, q)

    def _trusts_drafter(self, p_raw, q_raw):
        p_top = p_raw.amax(-1, keepdim=True)
        if self.variant == "chow":
            return p_top >= 1 - self.alpha
        if self.variant == "diff":
            return p_top >= q_raw.amax(-1, keepdim=True) - self.alpha
        tv = 0.5 * (p_raw - q_raw).abs().sum(-1, keepdim=True)
        if self.variant == "opt":
            return p_top >= q_raw.amax(-1, keepdim=True) - self.alpha * tv
        return entropy(p_raw) <= entropy(q_raw) + self.alpha * tv

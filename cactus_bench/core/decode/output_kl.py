"""The output KL of a speculative round: KL(P_out ‖ q) per position, from the rule's exact output law on the
union of the warped supports; shared by both decode backends."""

from __future__ import annotations

import torch
from torch import Tensor

from cactus_bench.core.rules import Rule
from cactus_bench.core.rules.base import constant


def support_for(top_k: int, greedy: bool) -> int | None:
    """Tokens gathered per position for the output KL: the union of two top-k supports and their ties
    (None: no top-k, supports up to V, and the output KL is not computed)."""
    return 2 if greedy else (2 * top_k + 16 if top_k else None)


def unmeasured(shape: torch.Size, device: torch.device) -> tuple[Tensor, Tensor]:
    """No output KL and no support that fit, at every position (read only: `constant`s)."""
    kl = constant(("no output KL", shape, device), lambda: torch.zeros(shape, dtype=torch.float64, device=device))
    fits = constant(("no support fit", shape, device), lambda: torch.zeros(shape, dtype=torch.bool, device=device))
    return kl, fits


def output_kl(rule: Rule, p: Tensor, q: Tensor, support: int | None, raw: dict | None = None) -> tuple[Tensor, Tensor]:
    """KL(P_out ‖ q) at each position [..., ] of p, q [..., V], where P_out is the rule's exact output law of
    the position (the drafted token marginalised out: methods.md §2), computed on the union of the warped
    supports of p and q; and whether that union fit the `support` tokens gathered (top-k keeps at most k
    tokens each, ties aside). Where it did not, or when sampling has no top-k (supports up to V), the
    position is counted as skipped rather than estimated. `raw`: the engine's raw probabilities (draft_raw
    [..., V], target_raw [..., m+1, V]) for rules that read them."""
    V = p.shape[-1]
    if support is None:
        return unmeasured(p.shape[:-1], p.device)
    mass = p + q
    idx = torch.topk(mass, min(support, V), dim=-1).indices
    fits = (mass > 0).sum(-1) <= idx.shape[-1]
    ps, qs = p.gather(-1, idx).double(), q.gather(-1, idx).double()
    ps, qs = ps / ps.sum(-1, keepdim=True), qs / qs.sum(-1, keepdim=True)  # float32 sums are 1 ± 1e-7
    extra = {}
    if rule.needs_raw and raw:
        m = p.shape[-2]
        extra = {"p_raw": raw["draft_raw"].gather(-1, idx), "q_raw": raw["target_raw"][..., :m, :].gather(-1, idx)}
    law = rule.output_laws(ps, qs, **extra)
    terms = torch.where(law > 0, law * (torch.log(law) - torch.log(qs)), torch.zeros_like(law))
    return terms.sum(-1).clamp(min=0), fits  # KL >= 0: round-off below zero is zero

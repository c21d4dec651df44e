"""Mentored decoding (Tran-Thien 2023, "An optimal lossy variant of speculative decoding").

Maximise acceptance subject to KL(P_out ‖ q) ≤ D. Solution family: accept min(1, q_n/(β·p_n)), recover
from (q − β·p)+, β ∈ (0, 1] (β = 1 is SpS). Per position the smallest β whose exact law meets the budget,
found by a fixed-count search. The law does not depend on the drafted token:
P_out = min(p, q/β) + (1 − Σ min(p, q/β))·(q − βp)+ / Σ(q − βp)+.
"""

import contextlib

import torch

from cactus_bench.core.rules.base import Rule, check_range, constant, gather_last, general_accept, resolution_bits
from cactus_bench.core.rules.registry import register

# Elements of the candidate laws a search step may hold per position ((ways − 1) · S), by device type. On a GPU
# a step's launches cost more than its elements (a round's laws fit in one wave of the device); on a CPU the
# elements cost more (256 ways made a round 7x slower): one candidate a step, a bisection.
WAY_ELEMENTS = {"cuda": 2**20}


def mentored_law(p, q, beta):
    b = beta.unsqueeze(-1)
    accepted = torch.minimum(p, q / b)
    res = (q - b * p).clamp(min=0)
    z = res.sum(-1, keepdim=True)
    rec = torch.where(z > 0, res / torch.where(z > 0, z, torch.ones_like(z)), q)
    return accepted + (1 - accepted.sum(-1, keepdim=True)) * rec


@register("mentored")
class Mentored(Rule):
    label = "Mentored"
    sps_knob = {"divergence": 0.0}  # β = 1

    def __init__(self, divergence: float = 0.1):
        self.divergence = check_range(self.name, "divergence", divergence, 0.0)

    def beta(self, p, q):
        """Smallest β in (0, 1] with KL(P_out ‖ q) ≤ D, to the dtype's resolution, in a fixed number of steps:
        each tests `ways` − 1 evenly spaced β of the interval (lo, hi] at once (hi meets the budget: β = 1, SpS,
        meets any; lo does not) and keeps the gap after the leading over-budget ones, so every end kept was
        tested, as bisection's are. On a GPU a small vocabulary takes 256 ways, 3 steps on float32 (`ways`);
        each position's search is its own, so a batch decides as its rows would alone."""
        shape = p.shape[:-1]
        if self.divergence == 0:  # SpS exactly: a float32 KL rounds to 0 at a β just under 1 too
            return torch.ones(shape, dtype=p.dtype, device=p.device)
        way_bits = ways_log2(p.shape[-1], p.device)
        grid = fractions(2**way_bits, p.dtype, p.device)  # [ways − 1, 1]: β runs down the second-last axis
        lo = torch.zeros((*shape, 1, 1), dtype=p.dtype, device=p.device)
        hi = torch.ones((*shape, 1, 1), dtype=p.dtype, device=p.device)
        p_, q_ = p.unsqueeze(-2), q.unsqueeze(-2)
        log_q = torch.log(q_).clamp_(min=torch.finfo(p.dtype).min)  # finite: h is 0 where q is
        for _ in range(-(-resolution_bits(p.dtype) // way_bits)):
            betas = torch.addcmul(lo, hi - lo, grid)  # [..., ways − 1, 1]
            over = law_kl(p_, q_, log_q, betas) > self.divergence
            k = over.int().cumprod(-2).sum(-2, keepdim=True)  # the leading over-budget β
            ends = torch.cat([lo, betas, hi], -2)
            lo, hi = ends.gather(-2, k), ends.gather(-2, k + 1)
        return hi.view(shape)

    def trace_key(self) -> tuple:
        return (*super().trace_key(), tuple(sorted(WAY_ELEMENTS.items())))  # the search a graph was traced with

    def prepare(self, p, q, n, **raw):
        return {"beta": self.beta(p, q)}  # one search per position, shared by the three functions below

    def _beta(self, p, q, prepared):
        return self.beta(p, q) if prepared is None else prepared

    def accept_prob(self, p, q, n, beta=None, **raw):
        return general_accept(gather_last(q, n) / self._beta(p, q, beta), gather_last(p, n))

    def residual(self, p, q, n, beta=None, **raw):
        return (q - self._beta(p, q, beta).unsqueeze(-1) * p).clamp(min=0)

    def target(self, p, q, n, beta=None, **raw):
        """The law this rule emits (it has no separate target): its target KL is its output KL."""
        return mentored_law(p, q, self._beta(p, q, beta))


def ways_log2(vocab: int, device: torch.device) -> int:
    """log₂ of the candidates (plus one) a search step tests per position: as many as `WAY_ELEMENTS` allows on
    this device type, 2 to 256."""
    return max(1, min(8, (WAY_ELEMENTS.get(device.type, 0) // max(vocab, 1)).bit_length() - 1))


@contextlib.contextmanager
def searching_as(device_type: str):
    """Search as on `device_type` whatever the device: launch counts taken on a CPU predict a GPU's."""
    before = dict(WAY_ELEMENTS)
    WAY_ELEMENTS.update({t: before.get(device_type, 0) for t in ("cpu", "cuda", device_type)})
    try:
        yield
    finally:
        WAY_ELEMENTS.clear()
        WAY_ELEMENTS.update(before)


def law_kl(p, q, log_q, b):
    """KL(P_out(β) ‖ q) [..., K, 1] for each β of `b` [..., K, 1] (p, q, log q: [..., 1, S]), in few ops:
    β < 1, so the residual's mass Σ(q − βp)+ ≥ 1 − β is never 0 and needs no guard."""
    accepted = torch.minimum(p, q / b)
    res = torch.addcmul(q, b, p, value=-1).clamp_(min=0)
    h = torch.addcmul(accepted, res, (1 - accepted.sum(-1, keepdim=True)) / res.sum(-1, keepdim=True))
    return torch.addcmul(torch.special.xlogy(h, h), h, log_q, value=-1).sum(-1, keepdim=True)


def fractions(ways: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """j / ways for j = 1 .. ways − 1 as a column (a `constant`)."""
    return constant(
        ("fractions", ways, dtype, device),
        lambda: (torch.arange(1, ways, dtype=dtype, device=device) / ways).unsqueeze(-1),
    )

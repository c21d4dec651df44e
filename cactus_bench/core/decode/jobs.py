"""What the engine decodes and how: a job (one request), a row (a job in a batch slot), the engine's options,
and what a round carries from one phase to the next."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import torch
from torch import Tensor

from cactus_bench.core.decode.cache import ForwardTimer
from cactus_bench.core.decode.stats import Rounds


@dataclass
class Job:
    """One request as the engine sees it: prompt ids, budget, random stream, stop test, caller's handle."""

    prompt: list[int]
    max_new_tokens: int
    generator: torch.Generator  # a CPU generator: the item's random stream, whatever device decodes it
    stop: Callable[[list[int]], bool] | None = None  # stop(generated) -> True ends decoding
    handle: Any = None  # the caller's (a Request for decoders)


@dataclass
class Row:
    job: Job
    committed: list[int]
    start: float
    prefill: float
    generated: list[int] = field(default_factory=list)
    rounds: Rounds = field(default_factory=Rounds)
    graphs_before: int = 0  # graphs this process had compiled when the row was admitted
    block: Tensor | None = None  # the verifier-alone loop's current block of uniforms, and the next one used
    used: int = 0
    has_kl: bool = False
    lag: int = 2  # committed tokens the drafter lacks (if it drafts again): 2 after the prompt or a full round, else 1
    chunk_times: list[float] = field(default_factory=list)  # seconds from `start` at each round's end

    @property
    def left(self) -> int:
        return self.job.max_new_tokens - len(self.generated)


@dataclass(frozen=True)
class EngineOptions:
    """How the engine runs (not what it samples): batch size, compiled forwards, timing."""

    batch_size: int | str = 1  # rows decoded at once; "auto": as many as fit the device's free memory
    compile: str | None = None  # a torch.compile backend for the steady-state forwards (None: eager)
    _: KW_ONLY  # the rest by name only
    warm_up: bool = True  # compiled forwards: compile (on CUDA, record) every graph before the first item
    sync_timing: bool = False  # synchronise CUDA at phase boundaries so phase times are exact (costs time)
    forward_timer: ForwardTimer | None = None  # accumulates time inside decode forwards (benchmarks)
    statistics: bool = True  # compute the target and output KL each round (off: not measured, not timed)


@dataclass
class RoundPlan:
    """A round's inputs: each row's uniforms, and its host values moved in one transfer."""

    u_drafts: list[Tensor]  # one [B, 1] per draft step
    u_verify: Tensor  # [B, m+1]: the accept tests and the sampled token
    reach: int  # the longest row's committed length
    steps: int  # draft steps taken: the most any row's budget can use
    draft_at: Tensor  # [B] the drafter's write positions
    verify_at: Tensor  # [B] the verifier's
    budget: Tensor  # [B] each row's draft budget
    first: list[Tensor]  # what the drafter is fed first: lag columns of [B]
    last: Tensor  # [B] each row's last committed token, the verifier's first


def cut_tokens(tokens: list[int], eos: set[int], budget: int) -> tuple[list[int], str | None]:
    """Cut a round's tokens at the first EOS (kept) or at the token budget."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], "eos"
    if len(tokens) >= budget:
        return tokens[:budget], "length"
    return tokens, None


class PhaseClock:
    """Phase timer; on CUDA it synchronises at phase boundaries only if asked (that costs time)."""

    def __init__(self, device: torch.device, sync: bool):
        self.sync = sync and device.type == "cuda"
        self.t = time.perf_counter()

    def lap(self) -> float:
        if self.sync:
            torch.cuda.synchronize()
        now = time.perf_counter()
        dt, self.t = now - self.t, now
        return dt

"""One request through the engine: `speculative_generate` and `autoregressive_generate`, the functional
API the tests, the embedded pair's quality check and the benchmarks use. `Decoder`s batch requests
through the same `Engine`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from cactus_bench.core.decode.cache import ForwardTimer
from cactus_bench.core.decode.engine import Engine, EngineOptions, Job
from cactus_bench.core.decode.stats import GenerationOutput
from cactus_bench.core.decode.warp import Warper
from cactus_bench.core.rules import Rule, build_rule


@dataclass(frozen=True)
class DecodeOptions:
    """What both loops take as keyword arguments: the token budget, the warpers, the random stream, the
    stopping criteria, the compiled forward and timing."""

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    generator: torch.Generator | None = None
    eos_token_id: int | Sequence[int] | None = None
    stop: Callable[[list[int]], bool] | None = None  # stop(generated tokens) -> True ends decoding
    vocab: int | None = None  # sample ids below this (default: the smaller model's vocabulary)
    compile: str | None = None  # a torch.compile backend for the decode forwards (inductor; None: eager)
    sync_timing: bool = False  # synchronise CUDA at phase boundaries so phase times are exact (costs time)
    forward_timer: ForwardTimer | None = None  # accumulates time inside decode forwards (benchmarks)

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}")

    @classmethod
    def of(cls, options: dict) -> DecodeOptions:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown decode option(s) {unknown}; valid: {sorted(known)}")
        return cls(**options)

    @property
    def warper(self) -> Warper:
        return Warper(self.temperature, self.top_k, self.top_p)

    @property
    def eos(self) -> set[int]:
        if self.eos_token_id is None:
            return set()
        if isinstance(self.eos_token_id, int):
            return {self.eos_token_id}
        return {int(t) for t in self.eos_token_id}

    def engine_options(self) -> EngineOptions:
        return EngineOptions(1, self.compile, sync_timing=self.sync_timing, forward_timer=self.forward_timer)

    def job(self, input_ids) -> Job:
        generator = self.generator or torch.Generator().manual_seed(0)
        if generator.device.type != "cpu":
            raise ValueError("the decode engine draws random numbers on the host: pass a CPU torch.Generator")
        return Job(_as_prompt(input_ids), self.max_new_tokens, generator, self.stop)


def speculative_generate(
    drafter,
    verifier,
    input_ids,
    *,
    rule: Rule | str,
    m: int,
    on_round: Callable | None = None,
    **options,
) -> GenerationOutput:
    """Speculative decoding of one prompt with any acceptance rule (methods.md §2; `engine` has the round,
    and SpS's test at temperature 0). `on_round(engine, slots)` is called after each round (the cache tests
    use it). `options` are `DecodeOptions` fields (max_new_tokens is required)."""
    opts = DecodeOptions.of(options)
    rule = build_rule(rule) if isinstance(rule, str) else rule
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m (draft length) must be an integer >= 1; got {m!r}")
    engine = Engine(verifier, drafter, rule, m, opts.warper, opts.vocab, opts.eos, opts.engine_options())
    engine.on_round = on_round
    return _one(engine, opts.job(input_ids))


def autoregressive_generate(verifier, input_ids, **options) -> GenerationOutput:
    """The verifier alone, token by token, with the same warpers (the verifier-alone baseline and speedup
    denominator). Each step is one round: drafted 0, accepted 0, emitted 1. `options`: `DecodeOptions`."""
    opts = DecodeOptions.of(options)
    engine = Engine(verifier, None, None, 0, opts.warper, opts.vocab, opts.eos, opts.engine_options())
    return _one(engine, opts.job(input_ids))


def _one(engine: Engine, job: Job) -> GenerationOutput:
    ((_, out),) = engine.run([job])
    return out


def _as_prompt(input_ids) -> list[int]:
    if isinstance(input_ids, Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError(
                    f"one prompt at a time here (a Decoder batches); got input_ids {tuple(input_ids.shape)}"
                )
            input_ids = input_ids[0]
        input_ids = input_ids.tolist()
    return [int(t) for t in input_ids]

"""The transformers backend of `Decoder`: our batched engine (`decode/engine.py`) over Hugging Face causal LMs.

Engines: `eager` (plain forwards), `fast` (the steady-state forwards compiled with torch.compile: inductor
kernels and, on CUDA, CUDA graphs), `auto` (fast on CUDA, eager on a CPU or a verifier spread over several
devices). Both keep one preallocated row cache per model and batch size.

The backend owns its models (`models.load_pair`): one verifier in memory per process, so a sweep loads
each verifier once and swaps only drafters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from cactus_bench.core.decode.api import (
    BACKENDS,
    Backend,
    DecodeSpec,
    Generation,
    ModelLoadError,
    ModelSpec,
    Request,
    special_token_texts,
    stable_seed,
)

if TYPE_CHECKING:
    from cactus_bench.backends.hf.loader import Pair

ENGINES = ("eager", "fast", "auto")
COMPILE_BACKEND = "inductor"
log = logging.getLogger("cactus_bench")
_LOADED: dict[tuple, Pair] = {}  # the verifier (and drafter) in memory, by how they were loaded


def load_models(models: ModelSpec) -> Pair:
    """The pair: the verifier, and the drafter only where one is named. A later load of the same verifier
    reuses it (swapping only the drafter); another verifier frees the first."""
    from cactus_bench.backends.hf.loader import check_available, load_pair, with_drafter
    from cactus_bench.core.precision import dtype_name, resolve_device

    v, d = models.verifier, models.drafter
    key = (v, models.verifier_dtype or models.dtype, models.device, str(models.verifier_device_map), models.revision)
    try:
        check_available({"verifier": v} | ({"drafter": d} if d else {}), models.revision)
        pair = _LOADED.get(key)
        if pair is None:
            _LOADED.clear()  # one verifier in memory at a time
            pair = load_pair(
                d,
                v,
                dtype=models.dtype,
                drafter_dtype=models.drafter_dtype,
                verifier_dtype=models.verifier_dtype,
                device=models.device,
                verifier_device_map=models.verifier_device_map,
                revision=models.revision,
                log=log.info,
            )
        elif d is not None:
            dtype = models.drafter_dtype or models.dtype
            wanted = dtype_name(dtype, resolve_device(models.device))
            if (pair.drafter_id, pair.drafter_dtype) != (d, wanted):
                pair = with_drafter(pair, d, dtype, models.device, models.revision, log.info)
    except (OSError, ValueError, RuntimeError) as e:  # missing files, tokenizer mismatch, too big to fit
        raise ModelLoadError(f"loading {f'{d} + {v}' if d else v} failed: {e}") from e
    _LOADED[key] = pair
    return pair


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """lm-eval's convention: the text before the first stop string."""
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text


def resolve_engine(engine: str, pair: Pair) -> str:
    """`auto`: fast on CUDA (a launch-bound drafter needs compiled forwards and CUDA graphs), eager on a CPU
    (compiling costs minutes there and gains little) or when the verifier is spread over several devices."""
    if engine != "auto":
        return engine
    models = [m for m in (pair.verifier, pair.drafter) if m is not None]
    devices = {p.device for m in models for p in m.parameters()}
    return "fast" if all(d.type == "cuda" for d in devices) and len(devices) == 1 else "eager"


class HFDecoder:
    """Decodes requests `spec.batch_size` at a time (1: each alone, as the paper times), refilling a row as
    soon as its request finishes."""

    def __init__(self, pair: Pair, spec: DecodeSpec):
        from cactus_bench.core.decode.engine import Engine, EngineOptions
        from cactus_bench.core.decode.warp import Warper

        if spec.engine not in ENGINES:
            raise ValueError(f"unknown engine {spec.engine!r}; choose one of {', '.join(ENGINES)}")
        self.pair, self.spec = pair, spec
        self.engine_name = resolve_engine(spec.engine, pair)
        method = spec.method
        options = EngineOptions(
            batch_size=spec.batch_size,
            compile=COMPILE_BACKEND if self.engine_name == "fast" else None,
            statistics=spec.statistics,
            **spec.options,
        )
        self.engine = Engine(
            pair.verifier,
            pair.drafter if method.uses_drafter else None,
            method.rule,
            method.m if method.uses_drafter else 0,
            Warper(spec.temperature, spec.top_k, spec.top_p),
            pair.vocab_size,
            set(pair.eos_token_id),
            options,
        )
        self.device = str(self.engine.device)

    @property
    def tokenizer_name(self) -> str:
        return self.pair.tokenizer_name

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.pair.apply_chat_template(chat_history, add_generation_prompt)

    @property
    def special_tokens(self) -> tuple[str, ...]:
        return special_token_texts(self.pair.tokenizer)

    def generate(self, requests: Sequence[Request]) -> Iterator[Generation]:
        from cactus_bench.core.decode.engine import Job

        s, tok = self.spec, self.pair.tokenizer
        jobs = []
        for req in requests:
            ids = req.prompt
            if isinstance(ids, str):
                ids = tok(ids, add_special_tokens=s.add_bos_token)["input_ids"]
            generator = torch.Generator().manual_seed(stable_seed(s.seed, req.key))  # the engine draws on the host
            jobs.append(
                Job(list(ids), req.max_new_tokens or s.max_new_tokens, generator, _stop_test(tok, req.stop), req)
            )
        for job, out in self.engine.run(jobs):
            raw = reply_text(tok, out) if tok is not None else ""
            yield Generation(job.handle, out, cut_at_stop(raw, job.handle.stop), raw)


def reply_text(tok, out) -> str:
    """The reply as the authors' harness sees it: special tokens kept (their lm-eval decodes with
    skip_special_tokens=False), the final EOS left out (vLLM does not put the stop token's text in its
    output)."""
    ids = out.tokens[:-1] if out.stop_reason == "eos" else out.tokens
    return tok.decode(ids, skip_special_tokens=False)


def _stop_test(tok, stops: Sequence[str]):
    """stop(generated) -> whether the decoded tail contains a stop string (only the tail can newly have one)."""
    stops = [x for x in stops if x]
    if not stops:
        return None
    window = max(len(x) for x in stops) + 16
    return lambda tokens: any(x in tok.decode(tokens[-window:]) for x in stops)


def missing(models: ModelSpec) -> list[str]:
    from cactus_bench.backends.hf.loader import missing_models

    named = {"verifier": models.verifier} | ({"drafter": models.drafter} if models.drafter else {})
    return missing_models(named, models.revision)


def decoder(models: ModelSpec, spec: DecodeSpec) -> HFDecoder:
    return HFDecoder(load_models(models), spec)


BACKENDS.add(
    "hf",
    Backend(
        load=decoder,
        engines=ENGINES,
        devices=("cpu", "cuda", "mps"),
        missing=missing,
    ),
)

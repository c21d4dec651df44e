"""The transformers backend of `Decoder`: our batched engine (`decode/engine.py`) over Hugging Face causal LMs.

Engines: `eager` (plain forwards), `fast` (the steady-state forwards compiled with torch.compile: inductor
kernels and, on CUDA, CUDA graphs), `auto` (fast on CUDA, eager on a CPU or a verifier spread over several
devices). Both keep one preallocated row cache per model and batch size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from ..api import DECODERS, DecoderSettings, Generation, Request, stable_seed

if TYPE_CHECKING:
    from ...methods import Method
    from ...models import Pair

ENGINES = ("eager", "fast", "auto")
COMPILE_BACKEND = "inductor"
log = logging.getLogger("cactus_bench")


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
    """Decodes requests `settings.batch_size` at a time (1: each alone, as the paper times), refilling a
    row as soon as its request finishes."""

    def __init__(self, pair: Pair, method: Method, settings: DecoderSettings):
        from ...rules import build_rule
        from ..engine import Engine, EngineOptions
        from ..warp import Warper

        if settings.engine not in ENGINES:
            raise ValueError(f"unknown engine {settings.engine!r}; choose one of {', '.join(ENGINES)}")
        self.pair, self.method, self.settings = pair, method, settings
        self.engine_name = resolve_engine(settings.engine, pair)
        warper = Warper(settings.temperature, settings.top_k, settings.top_p)
        rule = method.rule
        if rule is not None and warper.greedy:  # at T = 0 every rule is exact-match acceptance: SpS's
            rule = build_rule("sps")
        options = EngineOptions(
            batch_size=settings.batch_size,
            compile=COMPILE_BACKEND if self.engine_name == "fast" else None,
            **settings.options,
        )
        self.engine = Engine(
            pair.verifier,
            pair.drafter if method.uses_drafter else None,
            rule,
            method.m if method.uses_drafter else 0,
            warper,
            pair.vocab_size,
            set(pair.eos_token_id),
            options,
        )
        self.device = self.engine.device

    def generate(self, requests: Sequence[Request]) -> Iterator[Generation]:
        from ..engine import Job

        s, tok = self.settings, self.pair.tokenizer
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


@DECODERS.register("hf")
def _hf(pair: Pair, method: Method, settings: DecoderSettings) -> HFDecoder:
    return HFDecoder(pair, method, settings)

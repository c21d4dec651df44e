"""The decoder interface: what the app, lm-eval's adapter and the benchmarks ask of an engine backend.

A `Decoder` turns a list of `Request`s into `Generation`s, yielded as each finishes (so a run can store
samples as they come, whatever order a batched backend finishes them in). It is built once per run by
`build_decoder(pair, method, settings)` from the backend registered under `settings.backend`; `settings`
(`DecoderSettings`) is the one place where sampling, token budget, seed and engine options are fixed.

Every request's random stream is seeded from the run seed and the request's key (`stable_seed`), so an
item's tokens do not depend on the order, the sharding or the resume of a run, and two methods decode
an item from the same random numbers.

A new backend (e.g. vLLM) is one module in `decode/backends/` with a factory decorated
`@DECODERS.register("name")` taking (pair, method, settings) and returning a `Decoder`, plus one
`conf/engine/<name>.yaml` naming it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..registry import Registry
from .stats import GenerationOutput

if TYPE_CHECKING:
    from ..methods import Method
    from ..models import Pair


@dataclass(frozen=True)
class Request:
    """One generation: a prompt (text, tokenised by the decoder, or token ids), the key of its random
    stream, the strings that end it, and its token budget (None: the decoder's)."""

    prompt: str | tuple[int, ...]
    key: Hashable
    stop: tuple[str, ...] = ()
    max_new_tokens: int | None = None


@dataclass
class Generation:
    request: Request
    output: GenerationOutput  # tokens, rounds, times, why it stopped
    text: str  # the reply cut at its first stop string (lm-eval's convention); thinking kept
    raw_text: str  # everything the model emitted, decoded
    paired: dict | None = None  # paired timing: the verifier alone's decode of the same request, timed beside

    def stats(self) -> dict:
        """The decode's statistics (`GenerationOutput.summary`), with the paired times where there are any."""
        return self.output.summary() | (self.paired or {})


class Decoder(Protocol):
    def generate(self, requests: Sequence[Request]) -> Iterator[Generation]:
        """Decode every request; yield each generation as it finishes."""


@dataclass(frozen=True)
class DecoderSettings:
    """What a decoder needs besides the pair and the method, fixed once per run."""

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0  # the run seed: request streams are seeded from (seed, request.key)
    backend: str = "hf"
    engine: str = "auto"  # the backend's engine option (hf: eager | fast | auto)
    batch_size: int = 1  # requests decoded at once
    add_bos_token: bool = False  # prepend BOS to text prompts (lm-eval does for Gemma)
    paired_timing: bool = False  # also decode each request with the verifier alone, back to back
    options: dict = field(default_factory=dict)  # backend-specific extras (e.g. a forward timer for benchmarks)

    @property
    def sampling(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}


DecoderFactory = Callable[["Pair", "Method", DecoderSettings], Decoder]
DECODERS: Registry[DecoderFactory] = Registry("decode backend")


def build_decoder(pair: Pair, method: Method, settings: DecoderSettings) -> Decoder:
    """The configured backend's decoder; with paired timing, each request is decoded by the verifier alone
    too, back to back (`PairedDecoder`)."""
    load_backends()
    make = DECODERS.get(settings.backend)
    decoder = make(pair, method, settings)
    if settings.paired_timing and method.uses_drafter:
        from ..methods import BASELINE
        from ..methods import Method as _Method

        return PairedDecoder(decoder, make(pair, _Method(BASELINE), settings))
    return decoder


def load_backends() -> None:
    """Import every backend module (`decode/backends/`), so DECODERS lists them; no model code loads."""
    from . import backends  # noqa: F401


class PairedDecoder:
    """Each request decoded by the method and by the verifier alone back to back, alternating which goes
    first, from the same seed the verifier-alone run uses (so the baseline decode is that run's decode of
    the request, timed again beside the method's). A busy machine then slows both alike."""

    def __init__(self, method: Decoder, baseline: Decoder):
        self.method, self.baseline = method, baseline
        self._pairs = 0  # paired requests so far: even ones time the verifier alone first

    def generate(self, requests: Sequence[Request]) -> Iterator[Generation]:
        for req in requests:
            baseline_first = self._pairs % 2 == 0
            self._pairs += 1
            if baseline_first:
                base = next(self.baseline.generate([req]))
                gen = next(self.method.generate([req]))
            else:
                gen = next(self.method.generate([req]))
                base = next(self.baseline.generate([req]))
            gen.paired = {
                "paired_baseline_time": base.output.wall_time,
                "paired_method_time": gen.output.wall_time,
                "paired_baseline_first": baseline_first,
                "paired_baseline_tokens": len(base.output.tokens),
            }
            yield gen


def stable_seed(*parts) -> int:
    """A seed from the run seed and a request key, stable across processes (Python's hash is salted)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") & (2**63 - 1)

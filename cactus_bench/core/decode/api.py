"""The decoder interface: what the app, lm-eval's adapter and the benchmarks ask of a decode backend.

A `Decoder` turns a list of `Request`s into `Generation`s, yielded as each finishes (so a run can store
samples as they come, whatever order a batched backend finishes them in), and says where it decodes and
how prompts are templated. A `Backend` (registered in `BACKENDS`) owns its models: `build_decoder(models,
spec)` hands it the names of the drafter and verifier (`ModelSpec`) and the one `DecodeSpec` of the run,
and it loads (or reuses) what it needs. Nothing above this interface loads or touches a model.

Every request's random stream is seeded from the run seed and the request's key (`stable_seed`), so an
item's tokens do not depend on the order, the sharding or the resume of a run, and two methods decode
an item from the same random numbers.

A new backend is one module calling `BACKENDS.add("name", Backend(...))` (registration checks it is a
`Backend` with engines and priced GPU engines), named in a `cactus_bench.backends` entry point: the built-in
ones (`cactus_bench/backends/`) in this project's pyproject.toml, an outside one in its package's.
`engine.backend=<name>` selects it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from cactus_bench.core.decode.stats import GenerationOutput
from cactus_bench.core.registry import Registry

if TYPE_CHECKING:
    from cactus_bench.core.methods import Method


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
    device: str  # where it decodes ("cpu", "cuda:0", ...): the timing conditions a sample is stored under

    def generate(self, requests: Sequence[Request]) -> Iterator[Generation]:
        """Decode every request; yield each generation as it finishes."""

    @property
    def tokenizer_name(self) -> str:
        """The name lm-eval files chat-templated prompts under."""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """A chat as the verifier's prompt text."""

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The texts of the verifier tokenizer's special tokens (what Spec-Bench removes from a reply)."""


def special_token_texts(tokenizer) -> tuple[str, ...]:
    """Every special token's text in a tokenizer's `special_tokens_map` (its lists flattened)."""
    texts: list[str] = []
    for value in getattr(tokenizer, "special_tokens_map", {}).values():
        texts += value if isinstance(value, list) else [value]
    return tuple(dict.fromkeys(t for t in texts if t))


@dataclass(frozen=True)
class ModelSpec:
    """The models a backend loads, by name (hub ids, local folders, GGUF files), and how (`conf/pair/`)."""

    verifier: str
    drafter: str | None  # None: the verifier alone, which never loads a drafter
    dtype: str
    drafter_dtype: str | None
    verifier_dtype: str | None
    device: str
    verifier_device_map: str | dict | None
    revision: str | None
    tensor_parallel_size: int = 1  # GPUs the verifier is spread over by a backend that shards (vllm)


@dataclass(frozen=True)
class DecodeSpec:
    """Everything a decode depends on besides the models, fixed once per run and built in one place
    (`app.config.decode_spec`); its defaults live in `conf/`, not here."""

    method: Method
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int  # the run seed: request streams are seeded from (seed, request.key)
    add_bos_token: bool  # prepend BOS to text prompts (lm-eval does for Gemma)
    backend: str
    engine: str  # the backend's engine option (hf: eager | fast | auto)
    batch_size: int | str  # requests decoded at once; auto: as many as fit the device's memory
    paired_timing: bool = False  # also decode each request with the verifier alone, back to back
    # compute the KL statistics (target and output KL); off for a decode whose statistics are dropped (the
    # timing sample): it times what the authors' code times, the decision without them
    statistics: bool = True
    settings: dict = field(default_factory=dict)  # the backend's own settings (conf/engine: engine.* but backend, name)
    options: dict = field(default_factory=dict, compare=False)  # backend extras for benchmarks (a forward timer)

    def verifier_alone(self) -> DecodeSpec:
        from cactus_bench.core.methods import BASELINE, Method

        return replace(self, method=Method(BASELINE), paired_timing=False)


@dataclass(frozen=True)
class Backend:
    """A decode backend as the app and config validation see it (what `plan` prices it with: tools/costs.py)."""

    load: Callable[[ModelSpec, DecodeSpec], Decoder]  # builds a decoder, loading (or reusing) the models
    engines: tuple[str, ...]  # the values engine.name may take
    devices: tuple[str, ...]  # the device kinds it decodes on (cpu, cuda, ...)
    # what of these models is not here, each with its fix, before anything loads (a run offline names every
    # missing model and dataset at once); None: the backend cannot tell before loading
    missing: Callable[[ModelSpec], list[str]] | None = None
    # why the backend cannot run on this machine (its engine package is not installed: what to install), as
    # one paragraph, checked with the config before anything loads; None: it can
    unavailable: Callable[[], str | None] | None = None
    # the backend's settings (`engine.settings.*`) that change the law of a sample's tokens: part of a run's
    # identity; and a check of all its settings, raising a ValueError that names the key (None: it has none)
    law_settings: tuple[str, ...] = ()
    tensor_parallel: bool = False  # it can shard a verifier over pair.tensor_parallel_size GPUs
    check_settings: Callable[[dict], None] | None = None


def _check_backend(name: str, backend: Backend) -> None:
    if not isinstance(backend, Backend):
        raise TypeError(f"decode backend {name!r}: register a decode.api.Backend, not {type(backend).__name__}")
    if not backend.engines:
        raise ValueError(f"decode backend {name!r} names no engine")


BACKENDS: Registry[Backend] = Registry("decode backend", _check_backend, group="cactus_bench.backends")


def backend(name: str) -> Backend:
    """The backend registered as `name` (built-in and installed packages' backends, all by entry point)."""
    return BACKENDS.get(name)


def backend_names() -> list[str]:
    return BACKENDS.names()


class ModelLoadError(RuntimeError):
    """A backend could not load its models; the message names the models and the key to change."""


def build_decoder(models: ModelSpec, spec: DecodeSpec) -> Decoder:
    """The spec's backend's decoder; with paired timing, each request is decoded by the verifier alone too,
    back to back (`PairedDecoder`)."""
    decoder = backend(spec.backend).load(models, spec)
    if spec.paired_timing and spec.method.uses_drafter:
        return paired_decoder(decoder, verifier_alone_decoder(models, spec))
    return decoder


def verifier_alone_decoder(models: ModelSpec, spec: DecodeSpec) -> Decoder:
    """The decoder of the spec's verifier-alone baseline (the drafter's name dropped: it loads none)."""
    return backend(spec.backend).load(replace(models, drafter=None), spec.verifier_alone())


def paired_decoder(method: Decoder, baseline: Decoder) -> PairedDecoder:
    """Each request decoded by the method and by the verifier alone back to back (a group of one member)."""
    return PairedGroup({"method": method}, baseline).member("method")


class PairedGroup:
    """Paired timing of one or more methods: each request decoded once by the verifier alone and once by every
    member, back to back, from the same seed the verifier-alone run uses (so the baseline decode is that run's
    decode of the request, timed again beside the methods'). The order rotates from request to request (with
    one member: the verifier alone first, then second), so no decode always follows another. A busy machine
    slows the decodes of a request alike; members timed together share their verifier-alone decode, so two
    methods' times of a request are taken moments apart, and one verifier-alone decode serves them all.

    Each member reads its generations through its own `Decoder` (`member(name)`); the first member to ask
    for a request decodes it for every member still to ask (`expect`: all of them unless told otherwise)."""

    def __init__(self, members: dict[str, Decoder], baseline: Decoder):
        self.members, self.baseline = members, baseline
        self._expected = list(members)
        self._request: Request | None = None
        self._ready: dict[str, Generation] = {}
        self._requests = 0  # requests decoded so far: the rotation's position

    def member(self, name: str) -> PairedDecoder:
        return PairedDecoder(self, name)

    def expect(self, names: Sequence[str]) -> None:
        """The members that will ask for the next request (a resume times only the members that lack it)."""
        unknown = [n for n in names if n not in self.members]
        if unknown:
            raise KeyError(f"not members of this paired group: {unknown}")
        self._expected = list(names)

    def take(self, name: str, request: Request) -> Generation:
        if self._ready:  # decoded for members that have not asked yet: they ask for the same request
            if request != self._request or name not in self._ready:
                pending = None if self._request is None else self._request.key
                raise ValueError(
                    f"paired group: member {name!r} asked for {request.key!r} while {sorted(self._ready)} had yet "
                    f"to take {pending!r}: members timed together take the same requests in turn"
                )
        elif name in self._expected:
            self._decode(request)
        else:
            raise ValueError(f"paired group: member {name!r} asked for a request it was not expected to time")
        return self._ready.pop(name)

    def _decode(self, request: Request) -> None:
        order: list[str | None] = [None, *self._expected]  # None: the verifier alone
        shift = self._requests % len(order)
        order = order[shift:] + order[:shift]
        self._requests += 1
        done: dict[str, Generation] = {}
        base: Generation | None = None
        for name in order:
            if name is None:
                base = next(iter(self.baseline.generate([request])))
            else:
                done[name] = next(iter(self.members[name].generate([request])))
        assert base is not None
        at = order.index(None)
        for name, gen in done.items():
            gen.paired = paired_record(gen.output, base.output, at < order.index(name)) | {"paired_methods": len(done)}
        self._request, self._ready = request, done


class PairedDecoder:
    """One member's view of a `PairedGroup`: its generations, each with its paired timing (`paired_record`)."""

    def __init__(self, group: PairedGroup, name: str):
        self.group, self.name = group, name
        self.method = group.members[name]
        self.device = self.method.device

    def generate(self, requests: Sequence[Request]) -> Iterator[Generation]:
        for req in requests:
            yield self.group.take(self.name, req)

    @property
    def tokenizer_name(self) -> str:
        return self.method.tokenizer_name

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.method.apply_chat_template(chat_history, add_generation_prompt)

    @property
    def special_tokens(self) -> tuple[str, ...]:
        return self.method.special_tokens


def paired_record(method: GenerationOutput, baseline: GenerationOutput, baseline_first: bool) -> dict:
    """One item's paired timing: both decodes' wall times, and the parts the cost model reads
    (`metrics.cost_model`): each side's tokens, prefill and forward times, the method's calls and drafts."""
    r, b = method.rounds, baseline.rounds
    return {
        "paired_baseline_time": baseline.wall_time,
        "paired_method_time": method.wall_time,
        "paired_baseline_first": baseline_first,
        "paired_baseline_tokens": len(baseline.tokens),
        "paired_method_tokens": len(method.tokens),
        "paired_method_calls": len(r.drafted),
        "paired_method_drafted": sum(r.drafted),
        "paired_method_draft_time": sum(r.t_draft),
        "paired_method_verify_time": sum(r.t_verify),
        "paired_method_prefill_time": method.prefill_time,
        "paired_baseline_verify_time": sum(b.t_verify),
        "paired_baseline_prefill_time": baseline.prefill_time,
    }


def stable_seed(*parts) -> int:
    """A seed from the run seed and a request key, stable across processes (Python's hash is salted)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") & (2**63 - 1)

"""`VLLMDecoder`: requests through a vLLM engine, each with the run's rule (plugin.py) and its own seed.

One engine per process and configuration (`_ENGINES`), reused across rules and runs: the rule travels with
each request (`SamplingParams.extra_args`), so a sweep over rules starts vLLM once per pair. The engine runs
in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) unless the verifier is spread over several GPUs.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cactus_bench.backends.hf.backend import cut_at_stop, reply_text
from cactus_bench.backends.vllm import memory, plugin
from cactus_bench.core.decode.api import (
    DecodeSpec,
    Generation,
    ModelLoadError,
    ModelSpec,
    Request,
    special_token_texts,
    stable_seed,
)
from cactus_bench.core.decode.stats import (
    GenerationOutput,
    Rounds,
    counted,
    counted_drafts,
    draft_budget,
    round_columns,
)
from cactus_bench.core.precision import dtype_name

log = logging.getLogger("cactus_bench")
# the engines in memory, reused by every run of the same models and settings: a paired run times a speculative
# and a verifier-alone one, a serving sweep one per draft length. key -> (key, LLM, its maximum number of
# sequences); past KEPT_ENGINES the least recently used is let go.
_ENGINES: dict[tuple, tuple[tuple, object, int]] = {}
KEPT_ENGINES = 4
NO_MODEL_DEFAULTS = "vllm"  # vLLM's `generation_config`: its neutral defaults, never the checkpoint's
# every sampling setting a run has no key for, stated at its neutral value in each request (this project's
# rules define p and q by temperature, top-k and top-p alone; the transformers engine applies nothing else)
NEUTRAL_SAMPLING = {"min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def _environment(tensor_parallel: int) -> None:
    """vLLM's sockets and caches in a temporary folder (it otherwise leaves them in /tmp and ~/.cache), and
    the engine in this process when it needs no worker processes."""
    if "VLLM_RPC_BASE_PATH" not in os.environ:  # once per process
        scratch = tempfile.mkdtemp(prefix="cactus-vllm-")
        os.environ["VLLM_RPC_BASE_PATH"] = scratch
        os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(scratch, "cache"))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # keep the run's torch threads
    if tensor_parallel == 1:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def engine(models: ModelSpec, spec: DecodeSpec, drafter: str | None):
    """The vLLM engine for these models (the drafter as its draft model; None: the verifier alone)."""
    import torch

    s = spec.settings
    on_gpu = torch.cuda.is_available() and models.device != "cpu"
    name = spec.engine if spec.engine != "auto" else ("compiled" if on_gpu else "eager")
    m = spec.method.m if drafter else 0
    # what `auto` means in this project (a run's identity holds it): bfloat16 on CUDA, float32 on a CPU; vLLM's
    # own `auto` would take the checkpoint's dtype instead
    dtype = dtype_name(models.verifier_dtype or models.dtype, "cuda" if on_gpu else "cpu")
    kv = s.get("kv_cache_gib")
    rows = 256 if spec.batch_size == "auto" else int(spec.batch_size)  # auto: vLLM's scheduler fills memory
    key = (models.verifier, drafter, dtype, name, m, models.tensor_parallel_size, kv, s.get("max_model_len"))
    if key in _ENGINES and _ENGINES[key][2] >= rows:  # the decoder keeps at most its batch size in flight
        _ENGINES[key] = _ENGINES.pop(key)  # the most recently used
        return _ENGINES[key][1]  # a timing sample at batch size 1 reuses the batched run's engine
    _environment(models.tensor_parallel_size)
    from vllm import LLM

    options: dict = {
        "model": models.verifier,
        "tokenizer": models.verifier,
        "revision": models.revision,
        "dtype": dtype,
        "seed": spec.seed,
        "enforce_eager": name == "eager",
        "max_model_len": s.get("max_model_len") or 4096 + spec.max_new_tokens + m + 1,
        "max_num_seqs": rows,
        "tensor_parallel_size": models.tensor_parallel_size,
        "async_scheduling": False,  # rounds are read at each step: the engine must not run a step ahead
        "disable_log_stats": True,
        # the run's sampling and nothing else: "auto" (vLLM's default) reads the model's generation_config.json
        # sampling defaults (Qwen3's: T 0.6, top-k 20, top-p 0.95) into every request that leaves them unset
        "generation_config": NO_MODEL_DEFAULTS,
    }
    if kv is not None:
        options["kv_cache_memory_bytes"] = int(kv * 2**30)
    elif on_gpu and spec.batch_size == "auto":  # throughput on a GPU: vLLM's own share of its memory
        log.info("vLLM KV cache: vLLM's default share of the GPU (batch_size=auto)")
    else:  # what the run needs, not vLLM's share of the whole device (memory.py)
        cache = kv_cache(models, drafter, dtype, spec.batch_size, options["max_model_len"], on_gpu)
        options["kv_cache_memory_bytes"] = cache.per_device  # vLLM's is each device's
        log.info("vLLM KV cache: %s", cache.describe())
    if drafter:
        options["speculative_config"] = {
            "method": "draft_model",
            "model": drafter,
            "num_speculative_tokens": m,
            "draft_sample_method": "probabilistic",  # vLLM's default, greedy, would treat p as one-hot
        }
    _ENGINES.pop(key, None)  # free the engine this one replaces (fewer rows), and the least recently used
    for old in list(_ENGINES)[: max(len(_ENGINES) - KEPT_ENGINES + 1, 0)]:
        del _ENGINES[old]
    start = time.perf_counter()
    try:
        llm = LLM(**options)
    except (OSError, ValueError, RuntimeError) as e:
        raise ModelLoadError(
            f"vLLM could not start with {drafter + ' + ' if drafter else ''}{models.verifier}: {e}"
        ) from e
    hooks = llm.collective_rpc(plugin.installed)
    if not all(hooks):
        raise ModelLoadError(
            "vLLM started without cactus_bench's plugin (entry point vllm.general_plugins): reinstall this package "
            f"into vLLM's environment (`pip install -e .`), with vLLM {plugin.VLLM_VERSION} exactly"
        )
    log.info(
        "vLLM %s engine started in %.0fs (%s)",
        name,
        time.perf_counter() - start,
        "speculative" if drafter else "verifier alone",
    )
    _ENGINES[key] = (key, llm, rows)
    return llm


def kv_cache(models: ModelSpec, drafter: str | None, dtype: str, batch_size, tokens: int, on_gpu: bool):
    from transformers import AutoConfig

    configs = [AutoConfig.from_pretrained(models.verifier, revision=models.revision)]
    configs += [AutoConfig.from_pretrained(drafter)] if drafter else []
    itemsize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    tp = models.tensor_parallel_size
    return memory.plan(configs, itemsize, batch_size, tokens, memory.free_bytes(on_gpu), tp)


class VLLMDecoder:
    """Decodes requests through vLLM's scheduler, `batch_size` at a time (its maximum number of sequences);
    at batch size 1 each request is decoded and timed alone."""

    def __init__(self, models: ModelSpec, spec: DecodeSpec):
        import torch

        if spec.method.rule is not None and spec.method.rule.needs_raw:
            plugin.rule_of({"rule": spec.method.name, "params": spec.method.params})  # raises its paragraph
        self.models, self.spec = models, spec
        self.llm = engine(models, spec, models.drafter if spec.method.uses_drafter else None)
        self.tokenizer = self.llm.get_tokenizer()
        self.device = "cuda:0" if torch.cuda.is_available() and models.device != "cpu" else "cpu"
        eos = self.llm.llm_engine.model_config.hf_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos]) | {self.tokenizer.eos_token_id}

    @property
    def tokenizer_name(self) -> str:
        return self.models.verifier.replace("/", "__")

    @property
    def special_tokens(self) -> tuple[str, ...]:
        return special_token_texts(self.tokenizer)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        text = self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        assert isinstance(text, str)
        return text

    def _params(self, req: Request, tag: str):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        s, method = self.spec, self.spec.method
        extra = None
        if method.uses_drafter:
            extra = plugin.request_settings(method.name, method.params, s.settings["drafter_warp"], tag)
        return SamplingParams(
            temperature=s.temperature,
            top_k=s.top_k,
            top_p=s.top_p,
            **NEUTRAL_SAMPLING,
            max_tokens=req.max_new_tokens or s.max_new_tokens,
            seed=stable_seed(s.seed, req.key) % 2**63,
            stop=[x for x in req.stop if x] or None,
            skip_special_tokens=False,
            extra_args=extra,
            output_kind=RequestOutputKind.DELTA,  # each step's new tokens, as a server streams them
        )

    def generate(self, requests: Sequence[Request]) -> Iterator[Generation]:
        """Each request through vLLM's scheduler, at most `batch_size` in flight (auto: all at once): a
        finished request's slot takes the next, as the transformers engine's rows do, and each is yielded as it
        finishes. Its wall time runs from its admission, and its chunks' times are read from vLLM's
        streamed step outputs (a batched request's times overlap others', as a batched row's do)."""
        engine = self.llm.llm_engine
        width = len(requests) if self.spec.batch_size == "auto" else int(self.spec.batch_size)
        waiting = list(reversed(requests))
        live: dict[str, _Live] = {}
        try:
            yield from self._serve(engine, waiting, live, width)
        finally:  # a consumer that stopped early (or an error) leaves no request behind in the engine
            if live:
                engine.abort_request(list(live))

    def _serve(self, engine, waiting: list[Request], live: dict[str, _Live], width: int) -> Iterator[Generation]:
        while waiting or live:
            while waiting and len(live) < width:
                req = waiting.pop()
                tag = uuid.uuid4().hex
                params, prompt = self._params(req, tag), {"prompt_token_ids": self._ids(req)}  # a TokensPrompt
                admitted = time.perf_counter()
                engine.add_request(tag, prompt, params)
                live[tag] = _Live(req, params, admitted, len(prompt["prompt_token_ids"]))
            finished = []
            for out in engine.step():
                now = time.perf_counter()
                state = live[out.request_id]
                completion = out.outputs[0]
                if completion.token_ids:
                    state.chunk_times.append(now - state.admitted)
                state.tokens += completion.token_ids
                if out.finished:
                    state.finish, state.completion = now, completion
                    finished.append(out.request_id)
            if not finished:
                continue
            rounds = {}
            if self.spec.method.uses_drafter:
                rounds = self.llm.collective_rpc(plugin.take_rounds, args=(finished,))[0]
            for tag in finished:
                yield self._generation(live.pop(tag), rounds.get(tag, []))

    def _generation(self, state: _Live, recorded: list[list]) -> Generation:
        tokens = state.tokens
        reason = _stop_reason(state.completion, tokens, self.eos)
        if self.spec.method.uses_drafter and len(tokens) > 1 and not recorded:
            what = f"no acceptance step was recorded for a reply of {len(tokens)} tokens"
            raise RuntimeError(plugin.unexpected("the front end", what))
        wall = state.finish - state.admitted
        output = GenerationOutput(
            tokens,
            build_rounds(recorded, len(tokens), state.params.max_tokens, self.eos, wall),
            0.0,
            wall,
            reason,
            has_kl=self.spec.method.uses_drafter and any(r[3] is not None for r in recorded),
            chunk_times=state.chunk_times,
            prompt_tokens=state.prompt_tokens,
        )
        raw = reply_text(self.tokenizer, output)
        return Generation(state.request, output, cut_at_stop(raw, state.request.stop), raw)

    def _ids(self, req: Request) -> list[int]:
        if isinstance(req.prompt, str):
            return self.tokenizer(req.prompt, add_special_tokens=self.spec.add_bos_token)["input_ids"]
        return list(req.prompt)


@dataclass
class _Live:
    """A request in flight: its settings, when it was admitted, and what it has streamed so far."""

    request: Request
    params: Any  # vLLM's SamplingParams
    admitted: float
    prompt_tokens: int
    chunk_times: list[float] = field(default_factory=list)  # seconds from admission at each streamed step
    tokens: list[int] = field(default_factory=list)
    finish: float = 0.0
    completion: Any = None  # its last step's CompletionOutput (finish and stop reasons)


def _stop_reason(completion, tokens: list[int], eos: set[int]) -> str:
    if completion.finish_reason == "length":
        return "length"
    return "eos" if tokens and tokens[-1] in eos and completion.stop_reason is None else "stop"


def build_rounds(recorded: list[list], n_tokens: int, max_tokens: int, eos: set[int], wall: float) -> Rounds:
    """A generation's rounds from the plugin's record of its drafting steps (`plugin.ROUND_FIELDS`), counted
    by the definition every backend uses (`stats.round_columns`): the drafts up to the first drafted EOS and
    the room the token budget left (vLLM drafts and tests all m past both; the transformers engine stops
    there), the KLs over the positions decided within them. A round is a call of the acceptance step: the
    prefill's token is not one (the transformers engine verifies the prompt's last token in its first round
    instead), and a step without drafts between two recorded ones is a call that emitted one token. The last
    round is cut where the generation stopped. Times: vLLM does not split a step into drafting and verifying,
    so beyond the acceptance step's own time (t_rule) a generation's time is t_other."""
    rounds = Rounds()
    done = min(1, n_tokens)  # the prefill's token
    for before, drafts, passes, kl, out_kl, fits, t_rule in recorded:
        before = int(before)
        for _ in range(before - done):
            rounds.record_token()
        m = len(drafts)
        through_eos = next((j + 1 for j, t in enumerate(drafts) if t in eos), m)
        budget = torch.tensor([draft_budget(m, max_tokens - before)])
        n_drafts = counted_drafts(budget, torch.tensor([through_eos]))
        c = counted(
            round_columns(
                torch.tensor([passes]),
                n_drafts,
                None if kl is None else torch.tensor([kl]),
                torch.tensor([out_kl]),
                torch.tensor([fits], dtype=torch.bool),
            )[0].tolist()
        )
        emitted = min(int(c["accepted"]) + 1, n_tokens - before)  # the generation may stop inside this round
        if kl is None:  # no target KL measured: none counted
            c["kl_count"] = 0
        rounds.record(c, accepted=min(int(c["accepted"]), emitted), emitted=emitted, times=(0.0, 0.0, t_rule))
        done = before + emitted
    for _ in range(n_tokens - done):
        rounds.record_token()
    if rounds.t_other:
        rounds.t_other[-1] = max(wall - sum(rounds.t_rule), 0.0)
    return rounds


def decoder(models: ModelSpec, spec: DecodeSpec) -> VLLMDecoder:
    return VLLMDecoder(models, spec)

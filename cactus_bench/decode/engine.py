"""The speculative decode loop (methods.md §2) over Hugging Face causal LMs, batch size 1.

Invariant between rounds: `committed` holds prompt + generated tokens, and each model's KV cache holds
*at most* `committed[:-1]`; a forward feeds the committed tokens its cache lacks (the last one, or two
after a fully accepted block: the drafter never saw d_m) followed by new drafts. Rollback is a crop of
the cache to the committed prefix, so nothing the cache holds is ever recomputed.

One host sync per round: the emitted tokens, the accept count and the KL sum come back in one transfer.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, StaticLayer, StaticSlidingWindowLayer

from ..rules import Rule, build_rule, sample_weights
from .warp import Warper


@dataclass
class Rounds:
    """Per-round statistics, one entry per verifier call (columnar, JSON-friendly)."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)  # drafts accepted before the first rejection
    emitted: list[int] = field(default_factory=list)  # tokens committed this round (accepted + 1, or cut)
    t_draft: list[float] = field(default_factory=list)
    t_verify: list[float] = field(default_factory=list)
    t_rule: list[float] = field(default_factory=list)
    t_other: list[float] = field(default_factory=list)
    kl_sum: list[float] = field(default_factory=list)  # Σ KL(h‖q) over the positions verified this round
    kl_count: list[int] = field(default_factory=list)

    def add(self, **row):
        for k, v in row.items():
            getattr(self, k).append(v)


@dataclass
class GenerationOutput:
    tokens: list[int]  # generated ids, prompt excluded
    rounds: Rounds
    prefill_time: float
    wall_time: float  # prefill included
    stop_reason: str  # "eos" | "length" | "stop"
    has_kl: bool = False

    @property
    def verifier_calls(self) -> int:
        return len(self.rounds.drafted)

    @property
    def accepted_length(self) -> float:
        """AL: mean accepted drafts per verifier call (the paper's AL_m)."""
        return sum(self.rounds.accepted) / max(self.verifier_calls, 1)

    @property
    def tau(self) -> float:
        """Emitted tokens per verifier call (Spec-Bench's mean accepted tokens; 1 for AR)."""
        return sum(self.rounds.emitted) / max(self.verifier_calls, 1)

    @property
    def acceptance_rate(self) -> float | None:
        drafted = sum(self.rounds.drafted)
        return sum(self.rounds.accepted) / drafted if drafted else None

    @property
    def realised_kl(self) -> float | None:
        n = sum(self.rounds.kl_count)
        return sum(self.rounds.kl_sum) / n if (self.has_kl and n) else None

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.wall_time if self.wall_time > 0 else float("nan")

    def summary(self) -> dict:
        r = self.rounds
        return {
            "new_tokens": len(self.tokens), "verifier_calls": self.verifier_calls,
            "drafted": sum(r.drafted), "accepted": sum(r.accepted),
            "rejected": sum(d - a for d, a in zip(r.drafted, r.accepted)),
            "accepted_length": self.accepted_length, "tau": self.tau, "acceptance_rate": self.acceptance_rate,
            "realised_kl": self.realised_kl, "kl_sum": sum(r.kl_sum) if self.has_kl else None,
            "kl_count": sum(r.kl_count) if self.has_kl else None, "wall_time": self.wall_time,
            "prefill_time": self.prefill_time,
            "tokens_per_s": self.tokens_per_s, "stop_reason": self.stop_reason,
            "t_draft": sum(r.t_draft), "t_verify": sum(r.t_verify), "t_rule": sum(r.t_rule),
            "t_other": sum(r.t_other),
        }


# --- model plumbing ---------------------------------------------------------------------------------


def _compiled_forward(model) -> Callable:
    """torch.compile of the model's forward (CUDA graphs on GPU: launch-bound drafters need them), kept on
    the model so later calls reuse the compiled graphs and it lives exactly as long as the model."""
    if not hasattr(model, "_cactus_compiled_forward"):
        # one graph per (shape, cache-size bucket): allow more than dynamo's default of 8 per function
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        mode = "reduce-overhead" if _device_of(model).type == "cuda" else None
        model._cactus_compiled_forward = torch.compile(model.forward, mode=mode, dynamic=False)
    return model._cactus_compiled_forward


class _Model:
    """A causal LM with its own KV cache, fed only the committed tokens its cache lacks.

    Eager: a DynamicCache (grows by concatenation, rollback slices). Fast path: a preallocated StaticCache
    (rollback moves the write position back, copying nothing) and compiled forwards for the steady-state
    shapes `compiled` ((new tokens, logits kept) pairs); the prefill and the short final rounds stay eager,
    so a run never recompiles.
    """

    def __init__(self, model, device: torch.device, static_len: int | None = None,
                 compiled: frozenset[tuple[int, int]] = frozenset()):
        self.model = model
        self.device = device
        self.static = static_len is not None
        self.cache = _rollback_safe_cache(model.config, static_len)
        self.cached = 0  # tokens the cache holds (kept here: asking the cache is slower)
        self.compiled = compiled
        self._compiled = _compiled_forward(model) if compiled else None
        # transformers 5.24 renamed past_key_values -> cache; 5.17 (the GPU box) may predate it.
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def forward(self, new: Tensor, keep: int, prefill: bool = False) -> Tensor:
        """Run `new` [1, n] on top of the cache; return the last `keep` logits [1, keep, V]."""
        n = new.shape[1]
        kw = {self._cache_kw: self.cache}
        if self.static:  # positions are explicit with a preallocated cache
            kw["cache_position"] = torch.arange(self.cached, self.cached + n, device=self.device)
        fn = self._compiled if (n, keep) in self.compiled and not prefill else self.model.forward
        out = fn(input_ids=new, use_cache=True, logits_to_keep=keep, **kw)
        self.cached += n
        return out.logits

    def rollback(self, length: int) -> None:
        """Drop cached positions beyond `length` (a rejected suffix)."""
        if self.cached > length:
            if self.static:  # move each layer's write position back, in place (compiled graphs hold it);
                for layer in self.cache.layers:  # StaticLayer.crop does this, but transformers 5.17 lacks it
                    layer.cumulative_length.sub_(self.cached - length)
            else:
                self.cache.crop(length - self.cached)  # negative: the number of tokens to drop
            self.cached = length


def _rollback_safe_cache(config, static_len: int | None):
    """The model's own cache layout, except that sliding-window layers (Gemma-2, Mistral) keep every position.

    A sliding layer evicts positions older than its window, so once a sequence passes the window a rejected
    suffix cannot be rolled back: the dynamic layer refuses to crop and the static one silently keeps the
    wrong window. A full-length layer crops exactly; the window itself is still applied by the model's
    attention mask, which is built from the config, not from the cache.
    """
    if static_len is None:
        cache = DynamicCache(config=config)
    else:
        cache = StaticCache(config=config, max_cache_len=static_len)
    for i, layer in enumerate(cache.layers):
        if type(layer) in (DynamicSlidingWindowLayer, StaticSlidingWindowLayer):
            cache.layers[i] = DynamicLayer() if static_len is None else StaticLayer(max_cache_len=static_len)
    return cache


def _static_len(needed: int) -> int:
    """Static caches come in sizes rounded up to 256 tokens, so prompts of different lengths reuse the
    same compiled graphs (their shapes include the cache size)."""
    return -(-needed // 256) * 256  # waste (attention over unused slots) stays small


def _device_of(model) -> torch.device:
    return model.get_input_embeddings().weight.device


def _context_limit(model) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def _check_context(name: str, model, needed: int, prompt_len: int) -> None:
    limit = _context_limit(model)
    if limit is not None and needed > limit:
        what = "the prompt alone" if prompt_len > limit else "prompt + max_new_tokens (+ draft lookahead)"
        raise ValueError(
            f"{name} context is {limit} tokens but {what} needs {needed}: shorten the prompt or lower "
            f"max_new_tokens"
        )


def _as_prompt(input_ids) -> list[int]:
    if isinstance(input_ids, Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError(f"batch size 1 only (as in the paper); got input_ids {tuple(input_ids.shape)}")
            input_ids = input_ids[0]
        input_ids = input_ids.tolist()
    ids = [int(t) for t in input_ids]
    if not ids:
        raise ValueError("input_ids is empty: a prompt needs at least one token (e.g. BOS)")
    return ids


def _eos_set(eos_token_id) -> set[int]:
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, int):
        return {eos_token_id}
    return {int(t) for t in eos_token_id}


def _commit(tokens: list[int], eos: set[int], budget: int) -> tuple[list[int], str | None]:
    """Cut a round's tokens at the first EOS (kept) or at the token budget."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], "eos"
    if len(tokens) >= budget:
        return tokens[:budget], "length"
    return tokens, None


class _Clock:
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


def _prefill(states: list[_Model], prompt: list[int]) -> None:
    """Fill each cache with the prompt but its last token (every round feeds the uncached tail)."""
    if len(prompt) > 1:
        for st in states:
            st.forward(torch.tensor([prompt[:-1]], device=st.device), keep=1, prefill=True)
    for st in states:
        if st.device.type == "cuda":
            torch.cuda.synchronize(st.device)


# --- the loops ---------------------------------------------------------------------------------------


def speculative_generate(
    drafter,
    verifier,
    input_ids,
    *,
    rule: Rule | str,
    m: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    stop: Callable[[list[int]], bool] | None = None,
    sync_timing: bool = False,
    static_cache: bool = False,
    compile: bool = False,
    on_round: Callable[[_Model, _Model, list[int]], None] | None = None,
) -> GenerationOutput:
    """Speculative decoding with any acceptance rule (methods.md §2). Batch size 1.

    Draft m tokens with the drafter, verify all m+1 positions in one verifier forward, apply `rule`,
    commit, roll both caches back. Stops at EOS (also inside an accepted block), when `stop(tokens)` is
    true, or at `max_new_tokens` (never past it). At temperature 0 every rule collapses to exact-match
    acceptance, which is what SpS does on one-hot distributions, so SpS is used. `on_round(drafter_state,
    verifier_state, committed)` is called after each round's rollback (tracing; the cache tests use it).
    `static_cache` preallocates both KV caches; `compile` (implies it) compiles the decode forwards.
    """
    rule = build_rule(rule) if isinstance(rule, str) else rule
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m (draft length) must be an integer >= 1; got {m!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    warp = Warper(temperature, top_k, top_p)
    if warp.greedy:
        rule = build_rule("sps")
    prompt = _as_prompt(input_ids)
    _check_context("drafter", drafter, len(prompt) + max_new_tokens, len(prompt))
    _check_context("verifier", verifier, len(prompt) + max_new_tokens, len(prompt))
    eos = _eos_set(eos_token_id)
    device = _device_of(verifier)
    static_len = _static_len(len(prompt) + max_new_tokens + m + 1) if (static_cache or compile) else None
    # steady state: the drafter takes 1 token (2 after a fully accepted block); the verifier m+1
    dm = _Model(drafter, _device_of(drafter), static_len, frozenset({(1, 1), (2, 1)}) if compile else frozenset())
    vm = _Model(verifier, device, static_len, frozenset({(m + 1, m + 1)}) if compile else frozenset())
    vocab = min(drafter.config.vocab_size, verifier.config.vocab_size)  # padded embeddings: shared part only
    raw = rule.needs_raw

    t_start = time.perf_counter()
    committed = list(prompt)
    with torch.inference_mode():
        _prefill([dm, vm], prompt)
        prefill = time.perf_counter() - t_start

        generated: list[int] = []
        rounds = Rounds()
        stop_reason = "length"
        has_kl = False
        while len(generated) < max_new_tokens:
            clock = _Clock(device, sync_timing)
            k = min(m, max_new_tokens - len(generated) - 1)  # the round's sampled token needs one slot

            # draft: p_1..p_k and d_1..d_k with the drafter's cache
            p_rows, p_raw_rows, drafts = [], [], []
            x = torch.tensor([committed[dm.cached :]], device=dm.device)
            for _ in range(k):
                logits = dm.forward(x, keep=1)[:, -1, :vocab]
                probs = warp(logits)
                tok = sample_weights(probs, generator)
                p_rows.append(probs)
                if raw:
                    p_raw_rows.append(torch.softmax(logits.float(), -1))
                drafts.append(tok)
                x = tok.view(1, 1)
            t_draft = clock.lap()

            # verify: one forward over the committed tail + k drafts -> q_1..q_{k+1}
            tail = torch.tensor([committed[vm.cached :]], device=device)
            d = torch.stack(drafts, 1).to(device) if k else torch.empty((1, 0), dtype=torch.int64, device=device)
            # .to: a verifier spread by device_map returns logits from its last GPU (a no-op otherwise)
            v_logits = vm.forward(torch.cat([tail, d], 1), keep=k + 1)[..., :vocab].to(device)
            q = warp(v_logits)
            t_verify = clock.lap()

            p = torch.stack(p_rows, 1).to(device) if k else q.new_empty((1, 0, vocab))
            kw = {}
            if raw and k:
                kw = {"draft_raw": torch.stack(p_raw_rows, 1).to(device),
                      "target_raw": torch.softmax(v_logits.float(), -1)}
            emitted, n_acc, kl_pos = rule.verify(p, q, d, generator, check=False, return_kl=True, **kw)
            if kl_pos is not None:
                has_kl = True
                verified = torch.arange(k, device=device) <= n_acc  # positions that saw a decision
                kl_sum = (kl_pos[0] * verified).sum().reshape(1).double()
            else:
                kl_sum = torch.zeros(1, dtype=torch.float64, device=device)
            host = torch.cat([emitted[0].double(), n_acc.double(), kl_sum]).tolist()  # the one sync
            t_rule = clock.lap()

            n = int(host[k + 1])
            tokens, reason = _commit([int(t) for t in host[: n + 1]], eos, max_new_tokens - len(generated))
            committed += tokens
            generated += tokens
            vm.rollback(len(committed) - 1)
            dm.rollback(len(committed) - 1)
            if reason is None and stop is not None and stop(generated):
                reason = "stop"
            if on_round is not None:
                on_round(dm, vm, committed)
            rounds.add(drafted=k, accepted=min(n, len(tokens)), emitted=len(tokens), t_draft=t_draft,
                       t_verify=t_verify, t_rule=t_rule, t_other=clock.lap(), kl_sum=host[k + 2],
                       kl_count=min(n + 1, k))
            if reason is not None:
                stop_reason = reason
                break
    return GenerationOutput(generated, rounds, prefill, time.perf_counter() - t_start, stop_reason, has_kl)


def autoregressive_generate(
    verifier,
    input_ids,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    stop: Callable[[list[int]], bool] | None = None,
    sync_timing: bool = False,
    static_cache: bool = False,
    compile: bool = False,
) -> GenerationOutput:
    """The verifier alone, token by token, with the same warpers (the `ar` baseline and speedup
    denominator). Each step is one round: drafted 0, accepted 0, emitted 1."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    warp = Warper(temperature, top_k, top_p)
    prompt = _as_prompt(input_ids)
    _check_context("verifier", verifier, len(prompt) + max_new_tokens, len(prompt))
    eos = _eos_set(eos_token_id)
    device = _device_of(verifier)
    static_len = _static_len(len(prompt) + max_new_tokens + 1) if (static_cache or compile) else None
    vm = _Model(verifier, device, static_len, frozenset({(1, 1)}) if compile else frozenset())

    t_start = time.perf_counter()
    committed = list(prompt)
    with torch.inference_mode():
        _prefill([vm], prompt)
        prefill = time.perf_counter() - t_start
        generated: list[int] = []
        rounds = Rounds()
        stop_reason = "length"
        x = torch.tensor([committed[-1:]], device=device)
        while len(generated) < max_new_tokens:
            clock = _Clock(device, sync_timing)
            logits = vm.forward(x, keep=1)[:, -1].to(device)
            t_verify = clock.lap()
            tok = sample_weights(warp(logits), generator)
            t = int(tok)  # the one sync per token
            t_rule = clock.lap()
            generated.append(t)
            x = tok.view(1, 1)
            reason = "eos" if t in eos else ("length" if len(generated) >= max_new_tokens else None)
            if reason is None and stop is not None and stop(generated):
                reason = "stop"
            rounds.add(drafted=0, accepted=0, emitted=1, t_draft=0.0, t_verify=t_verify, t_rule=t_rule,
                       t_other=clock.lap(), kl_sum=0.0, kl_count=0)
            if reason is not None:
                stop_reason = reason
                break
    return GenerationOutput(generated, rounds, prefill, time.perf_counter() - t_start, stop_reason)

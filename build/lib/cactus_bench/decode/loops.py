"""The decode loops (methods.md §2) over Hugging Face causal LMs, batch size 1.

Invariant between rounds: `committed` holds prompt + generated tokens, and each model's KV cache holds
*at most* `committed[:-1]`; a forward feeds the committed tokens its cache lacks (the last one, or two
after a fully accepted block: the drafter never saw d_m) followed by new drafts. Rollback is a crop of
the cache to the committed prefix, so nothing the cache holds is ever recomputed.

A speculative round is three phases, each a small function: `draft`, `verify`, `accept`. One host sync
per round: the emitted tokens, the accept count and the KL sum come back in one transfer.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..rules import Rule, build_rule, sample_weights
from .cache import CachedModel, ForwardTimer, device_of, static_cache_len
from .stats import GenerationOutput, Rounds
from .warp import Warper


@dataclass(frozen=True)
class DecodeOptions:
    """What both loops share: the token budget, the warpers, the random stream, the stopping criteria, the
    fast path and timing. The generate functions take these as keyword arguments."""

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    generator: torch.Generator | None = None
    eos_token_id: int | Sequence[int] | None = None
    stop: Callable[[list[int]], bool] | None = None  # stop(generated tokens) -> True ends decoding
    sync_timing: bool = False  # synchronise CUDA at phase boundaries so phase times are exact (costs time)
    static_cache: bool = False  # preallocated KV caches
    compile: bool = False  # compiled decode forwards (implies static_cache)
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

    def cached_model(self, model, needed: int, compiled: frozenset[tuple[int, int]]) -> CachedModel:
        """`model` with a cache for `needed` positions (static, bucketed, on the fast path)."""
        fast = self.static_cache or self.compile
        return CachedModel(
            model,
            device_of(model),
            static_cache_len(needed) if fast else None,
            compiled if self.compile else frozenset(),
            self.forward_timer,
        )


# --- one speculative round ---------------------------------------------------------------------------


@dataclass
class Draft:
    probs: Tensor  # [1, k, V] warped drafter distributions
    raw: Tensor | None  # [1, k, V] un-tempered ones (rules that read them)
    tokens: Tensor  # [1, k]


def draft(
    dm: CachedModel,
    committed: list[int],
    k: int,
    warp: Warper,
    vocab: int,
    generator,
    raw: bool,
    device: torch.device,
    eos: set[int] = frozenset(),
) -> Draft:
    """p_1..p_k and d_1..d_k from the drafter, fed the committed tokens its cache lacks first. Drafting stops
    after an EOS draft: nothing after it can be emitted, and a shorter draft leaves every position's law
    as it was (one host read per draft token, the price of not drafting past the end)."""
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
        if eos and int(tok) in eos:
            break
    if not k:  # one token of budget left: the verifier samples it alone
        none = torch.empty((1, 0), dtype=torch.int64, device=device)
        return Draft(torch.empty((1, 0, vocab), device=device), None, none)
    return Draft(
        torch.stack(p_rows, 1).to(device),
        torch.stack(p_raw_rows, 1).to(device) if raw else None,
        torch.stack(drafts, 1).to(device),
    )


def verify(vm: CachedModel, committed: list[int], d: Draft, warp: Warper, vocab: int) -> tuple[Tensor, Tensor]:
    """One verifier forward over the committed tail + the k drafts: warped q_1..q_{k+1} and the raw logits."""
    tail = torch.tensor([committed[vm.cached :]], device=vm.device)
    k = d.tokens.shape[1]
    # .to: a verifier spread by device_map returns logits from its last GPU (a no-op otherwise)
    logits = vm.forward(torch.cat([tail, d.tokens.to(vm.device)], 1), keep=k + 1)[..., :vocab].to(d.tokens.device)
    return warp(logits), logits


@dataclass
class Decision:
    tokens: list[int]  # emitted this round: the accepted drafts and one sampled token
    accepted: int  # drafts accepted before the first rejection
    accepted_any: int  # drafts whose accept test passed, at any position
    kl_sum: float | None  # Σ realised KL over the decided positions (None: the rule has no target)


def accept(rule: Rule, d: Draft, q: Tensor, v_logits: Tensor, generator) -> Decision:
    """The rule's decision on a round — the round's one host sync."""
    k = d.tokens.shape[1]
    p = d.probs if k else q.new_empty((1, 0, q.shape[-1]))
    raw = {"draft_raw": d.raw, "target_raw": torch.softmax(v_logits.float(), -1)} if (d.raw is not None) else {}
    v = rule.verify(p, q, d.tokens, generator, check=False, return_kl=True, **raw)
    if v.kl is not None:
        decided = torch.arange(k, device=q.device) <= v.n_accepted  # positions that saw a decision
        kl_sum = (v.kl[0] * decided).sum().reshape(1).double()
    else:
        kl_sum = torch.zeros(1, dtype=torch.float64, device=q.device)
    host = torch.cat([v.emitted[0].double(), v.n_accepted.double(), v.n_accepted_any.double(), kl_sum]).tolist()
    n = int(host[k + 1])
    return Decision([int(t) for t in host[: n + 1]], n, int(host[k + 2]), host[k + 3] if v.kl is not None else None)


# --- the loops ---------------------------------------------------------------------------------------


def speculative_generate(
    drafter,
    verifier,
    input_ids,
    *,
    rule: Rule | str,
    m: int,
    on_round: Callable[[CachedModel, CachedModel, list[int]], None] | None = None,
    **options,
) -> GenerationOutput:
    """Speculative decoding with any acceptance rule (methods.md §2). Batch size 1.

    Draft m tokens with the drafter, verify all m+1 positions in one verifier forward, apply `rule`,
    commit, roll both caches back. Stops at EOS (also inside an accepted block), when `stop(tokens)` is
    true, or at `max_new_tokens` (never past it). At temperature 0 every rule collapses to exact-match
    acceptance, which is what SpS does on one-hot distributions, so SpS is used. `on_round(drafter_state,
    verifier_state, committed)` is called after each round's rollback (tracing; the cache tests use it).
    `options` are `DecodeOptions` fields (max_new_tokens is required).
    """
    opts = DecodeOptions.of(options)
    rule = build_rule(rule) if isinstance(rule, str) else rule
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m (draft length) must be an integer >= 1; got {m!r}")
    warp = opts.warper
    if warp.greedy:
        rule = build_rule("sps")
    prompt = _as_prompt(input_ids)
    budget = opts.max_new_tokens
    _check_context("drafter", drafter, len(prompt) + budget, len(prompt))
    _check_context("verifier", verifier, len(prompt) + budget, len(prompt))
    eos = opts.eos
    device = device_of(verifier)
    needed = len(prompt) + budget + m + 1
    # steady state: the drafter takes 1 token (2 after a fully accepted block); the verifier m+1
    dm = opts.cached_model(drafter, needed, frozenset({(1, 1), (2, 1)}))
    vm = opts.cached_model(verifier, needed, frozenset({(m + 1, m + 1)}))
    vocab = min(drafter.config.vocab_size, verifier.config.vocab_size)  # padded embeddings: shared part only

    t_start = time.perf_counter()
    committed = list(prompt)
    with torch.inference_mode():
        _prefill([dm, vm], prompt)
        prefill = time.perf_counter() - t_start
        generated: list[int] = []
        rounds = Rounds()
        stop_reason = "length"
        has_kl = False
        while len(generated) < budget:
            clock = _Clock(device, opts.sync_timing)
            k = min(m, budget - len(generated) - 1)  # the round's sampled token needs one slot
            d = draft(dm, committed, k, warp, vocab, opts.generator, rule.needs_raw, device, eos)
            k = d.tokens.shape[1]  # fewer when the drafter ended its draft with EOS
            t_draft = clock.lap()
            q, v_logits = verify(vm, committed, d, warp, vocab)
            t_verify = clock.lap()
            decision = accept(rule, d, q, v_logits, opts.generator)
            n = decision.accepted
            has_kl = has_kl or decision.kl_sum is not None
            t_rule = clock.lap()

            tokens, reason = _commit(decision.tokens, eos, budget - len(generated))
            committed += tokens
            generated += tokens
            vm.rollback(len(committed) - 1)
            dm.rollback(len(committed) - 1)
            if reason is None and opts.stop is not None and opts.stop(generated):
                reason = "stop"
            if on_round is not None:
                on_round(dm, vm, committed)
            rounds.add(
                drafted=k,
                accepted=min(n, len(tokens)),
                accepted_any=decision.accepted_any,
                emitted=len(tokens),
                t_draft=t_draft,
                t_verify=t_verify,
                t_rule=t_rule,
                t_other=clock.lap(),
                kl_sum=decision.kl_sum or 0.0,
                kl_count=min(n + 1, k),
            )
            if reason is not None:
                stop_reason = reason
                break
    return GenerationOutput(generated, rounds, prefill, time.perf_counter() - t_start, stop_reason, has_kl)


def autoregressive_generate(verifier, input_ids, **options) -> GenerationOutput:
    """The verifier alone, token by token, with the same warpers (the `ar` baseline and speedup
    denominator). Each step is one round: drafted 0, accepted 0, emitted 1. `options`: `DecodeOptions`."""
    opts = DecodeOptions.of(options)
    warp = opts.warper
    prompt = _as_prompt(input_ids)
    budget = opts.max_new_tokens
    _check_context("verifier", verifier, len(prompt) + budget, len(prompt))
    eos = opts.eos
    device = device_of(verifier)
    vm = opts.cached_model(verifier, len(prompt) + budget + 1, frozenset({(1, 1)}))

    t_start = time.perf_counter()
    committed = list(prompt)
    with torch.inference_mode():
        _prefill([vm], prompt)
        prefill = time.perf_counter() - t_start
        generated: list[int] = []
        rounds = Rounds()
        stop_reason = "length"
        x = torch.tensor([committed[-1:]], device=device)
        while len(generated) < budget:
            clock = _Clock(device, opts.sync_timing)
            logits = vm.forward(x, keep=1)[:, -1].to(device)
            t_verify = clock.lap()
            tok = sample_weights(warp(logits), opts.generator)
            t = int(tok)  # the one sync per token
            t_rule = clock.lap()
            generated.append(t)
            x = tok.view(1, 1)
            reason = "eos" if t in eos else ("length" if len(generated) >= budget else None)
            if reason is None and opts.stop is not None and opts.stop(generated):
                reason = "stop"
            rounds.add(
                drafted=0,
                accepted=0,
                accepted_any=0,
                emitted=1,
                t_draft=0.0,
                t_verify=t_verify,
                t_rule=t_rule,
                t_other=clock.lap(),
                kl_sum=0.0,
                kl_count=0,
            )
            if reason is not None:
                stop_reason = reason
                break
    return GenerationOutput(generated, rounds, prefill, time.perf_counter() - t_start, stop_reason)


# --- helpers -----------------------------------------------------------------------------------------


def _check_context(name: str, model, needed: int, prompt_len: int) -> None:
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and needed > limit:
        what = "the prompt alone" if prompt_len > limit else "prompt + max_new_tokens (+ draft lookahead)"
        raise ValueError(
            f"{name} context is {limit} tokens but {what} needs {needed}: shorten the prompt or lower max_new_tokens"
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


def _prefill(states: list[CachedModel], prompt: list[int]) -> None:
    """Fill each cache with the prompt but its last token (every round feeds the uncached tail)."""
    if len(prompt) > 1:
        for st in states:
            st.forward(torch.tensor([prompt[:-1]], device=st.device), keep=1, prefill=True)
    for st in states:
        if st.device.type == "cuda":
            torch.cuda.synchronize(st.device)

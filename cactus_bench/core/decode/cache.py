"""A causal LM with a KV cache of B rows, each row at its own position (`ModelRunner`).

Rows of a batch accept different numbers of drafts per round, so each row has its own write position.
The cache is preallocated once ([B, heads, capacity, dim] per layer; `RowCache`) and kept in a pool per
(model, rows, capacity), so a run, and the next run of a sweep, write into the same tensors: a compiled
forward and its CUDA graphs are recorded once. Rollback is free: the host sets each row's write position
back and the next forward overwrites what was rejected (the attention mask never shows a row anything at
or past its position).

Attention reads only the live prefix: keys are sliced to a length bucket (`kv_bucket`: 64, 96, 128, 192,
256, ... up to the capacity) that covers the longest row, so a short sequence never streams the whole
budget's cache. Each (new tokens, bucket) pair is one compiled shape.

Sliding-window layers (Gemma-2, Mistral) keep every position here too: a window that has evicted a
position cannot be rolled back. The window is applied by the attention mask this module builds.
"""

from __future__ import annotations

import inspect
import time
import weakref

import torch
from torch import Tensor
from transformers.cache_utils import Cache, CacheLayerMixin

from cactus_bench.core.decode import graphs
from cactus_bench.core.decode.attention import grouped_attention, uses_grouped_attention
from cactus_bench.core.decode.buckets import kv_bucket
from cactus_bench.core.rules.base import positions as positions_of

MASK_FORMATS = ("sdpa", "eager")  # attention implementations whose masks this module builds
PREFILL = "cactus::prefill"  # the profiler's name for a row's prefill


def to_device(values: list, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A host list on the device without waiting for it (pinned memory on CUDA: the copy is queued)."""
    host = torch.tensor(values, dtype=dtype, pin_memory=device.type == "cuda")
    return on(host, device, non_blocking=True)


def on(t: Tensor, device: torch.device, non_blocking: bool = False) -> Tensor:
    """`t` on `device`, with no op dispatched when it is there already (`.to` is one even then)."""
    return t if t.device == device else t.to(device, non_blocking=non_blocking)


def cache_kwarg(model) -> str:
    """transformers 5.24 renamed `past_key_values` to `cache`; 5.17 (the GPU box) predates it."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def device_of(model) -> torch.device:
    return model.get_input_embeddings().weight.device


class RowLayer(CacheLayerMixin):
    """One attention layer's keys and values for every row; written at each row's position."""

    is_compileable = True
    is_sliding = False
    keys: Tensor  # allocated at the first update (the base allows None before it)
    values: Tensor

    def __init__(self, cache: RowCache):
        super().__init__()
        self._cache = cache
        self._read: dict[int, tuple[Tensor, Tensor]] = {}  # the first kv keys and values, per key length

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        rows, capacity = self._cache.rows, self._cache.capacity
        self.device = key_states.device
        heads, dk, dv = key_states.shape[1], key_states.shape[-1], value_states.shape[-1]
        self.keys = torch.zeros((rows, heads, capacity, dk), dtype=key_states.dtype, device=self.device)
        self.values = torch.zeros((rows, heads, capacity, dv), dtype=value_states.dtype, device=self.device)
        if not torch.compiler.is_compiling():
            torch._dynamo.mark_static_address(self.keys)  # stable addresses: CUDA graphs record them once
            torch._dynamo.mark_static_address(self.values)
        self.is_initialized = True

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self._cache.prefill_rows is not None:  # a prefill of some rows, from position 0
            which, n = self._cache.prefill_rows.to(self.device), key_states.shape[-2]
            self.keys[which, :, :n] = key_states
            self.values[which, :, :n] = value_states
            return self.keys[which, :, :n], self.values[which, :, :n]
        _, heads, n, _ = key_states.shape
        cache, kv = self._cache, self._cache.kv_len
        self.keys.scatter_(2, cache.write_index(n, heads, self.keys.shape[-1]), key_states)
        self.values.scatter_(2, cache.write_index(n, heads, self.values.shape[-1]), value_states)
        if torch.compiler.is_compiling():  # a graph makes the views for free; eager keeps them (each is an op)
            return self.keys[:, :, :kv], self.values[:, :, :kv]
        if kv not in self._read:
            self._read[kv] = (self.keys[:, :, :kv], self.values[:, :, :kv])
        return self._read[kv]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._cache.kv_len, 0

    def get_seq_length(self) -> int:
        return 0  # positions are per row and explicit: models never derive them from the cache

    def get_max_length(self) -> int:
        return self._cache.capacity


class RowCache(Cache):
    """Keys/values of B rows for every attention layer of one model, with the rows' write positions
    (`pos`, a device tensor the host sets) and the key length attention reads (`kv_len`, a bucket)."""

    def __init__(self, config, rows: int, capacity: int, device: torch.device):
        self.rows, self.capacity = rows, capacity
        self.pos = torch.zeros(rows, dtype=torch.long, device=device)
        torch._dynamo.mark_static_address(self.pos)
        self.key_positions = torch.arange(capacity, device=device).view(1, 1, 1, capacity)
        torch._dynamo.mark_static_address(self.key_positions)
        # what an eager one-token step reads, as views made once (each would be an op every step): the rows'
        # positions as a query [B, 1] and as a mask operand [B, 1, 1, 1], and the keys per key length
        self._query = (self.pos.view(rows, 1), self.pos.view(rows, 1, 1, 1))
        self._keys: dict[int, Tensor] = {}
        # scatter's index of a forward's new keys per (n, heads, dim), shared by its layers: one-token ones
        # are views of `pos` (kept), longer ones are made from the forward's positions (`query` clears them)
        self._one: dict[tuple, Tensor] = {}
        self._index: dict[tuple, Tensor] = {}
        self._at = self._query[1]
        self.kv_len = kv_bucket(1, capacity)
        self.prefill_rows: Tensor | None = None  # set only while some rows are prefilled
        super().__init__(layers=[RowLayer(self) for _ in range(config.num_hidden_layers)])
        types = getattr(config, "layer_types", None)
        window = getattr(config, "sliding_window", None)
        self.layer_types = set(types) if types else {"sliding_attention" if window else "full_attention"}
        self.window: int = window or 0  # read by sliding layers only, which have one

    def query(self, n: int) -> tuple[Tensor, Tensor]:
        """The positions of a forward's n queries: [B, n], and as [B, 1, n, 1] for `masks`."""
        if torch.compiler.is_compiling():  # a compiled graph makes them for free
            positions = self.pos.unsqueeze(1)
            positions = positions if n == 1 else positions + torch.arange(n, device=self.pos.device)
            return positions, positions.view(self.rows, 1, n, 1)
        if n == 1:
            self._at, self._index = self._query[1], self._one
            return self._query
        positions = self._query[0] + positions_of(n, self.pos.device)
        self._at, self._index = positions.view(self.rows, 1, n, 1), {}
        return positions, self._at

    def write_index(self, n: int, heads: int, dim: int) -> Tensor:
        """Where a forward's n new keys (or values) of `dim` go in each row: [B, heads, n, dim]. An eager
        forward makes it once for all its layers, from the positions `query` gave it."""
        if torch.compiler.is_compiling():  # a graph makes it for free
            at = (self.pos[:, None] + torch.arange(n, device=self.pos.device))[:, None, :, None]
            return at.expand(self.rows, heads, n, dim)
        index = self._index.get((n, heads, dim))
        if index is None:
            if self._at.shape[2] != n:  # a forward that did not ask `query` first
                self.query(n)
            index = self._index[(n, heads, dim)] = self._at.expand(self.rows, heads, n, dim)
        return index

    def keys(self) -> Tensor:
        """The first `kv_len` keys' positions [1, 1, 1, kv]: a view of one tensor made with the cache."""
        if torch.compiler.is_compiling():
            return self.key_positions[..., : self.kv_len]
        if self.kv_len not in self._keys:
            self._keys[self.kv_len] = self.key_positions[..., : self.kv_len]
        return self._keys[self.kv_len]

    def masks(self, at: Tensor, dtype: torch.dtype, impl: str) -> Tensor | dict[str, Tensor]:
        """The attention mask [B, 1, n, kv] of queries at `at` [B, 1, n, 1] (`query`) over the first `kv_len`
        keys: causal, and within the window for sliding layers; in the format `impl` wants (sdpa: bool,
        eager: additive)."""
        keys = self.keys()
        causal = keys <= at
        out = {}
        for kind in self.layer_types:
            mask = causal & (keys > at - self.window) if kind == "sliding_attention" else causal
            if impl == "eager":
                mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
                    ~mask, torch.finfo(dtype).min
                )
            out[kind] = mask
        return next(iter(out.values())) if len(out) == 1 else out


class ForwardTimer:
    """Accumulates the wall time of decode forwards (prefill excluded); pass it as `forward_timer=` to the
    engine. `sync` waits for the device around each forward, which costs time on CUDA."""

    def __init__(self, sync: bool = False):
        self.sync = sync
        self.seconds = 0.0
        self.calls = 0

    def _wait(self, device: torch.device) -> None:
        if self.sync and device.type == "cuda":
            torch.cuda.synchronize(device)


POOL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {rows: RowCache}


def pooled_cache(model, rows: int, capacity: int) -> RowCache:
    """The model's row cache for `rows` rows and at least `capacity` positions: made once, reused by every
    later run (the same tensors, so compiled graphs stay valid); a run that needs more positions replaces
    it with a larger one. A model keeps one batched cache besides the single row of timing samples: a new
    row count frees the other batched one first, so caches never pile up beyond what `rows_for` budgeted."""
    by_rows = POOL.setdefault(model, {})
    if rows not in by_rows or by_rows[rows].capacity < capacity:
        for other in [r for r in by_rows if r == rows or (rows > 1 and r > 1)]:
            del by_rows[other]  # free the smaller (or other batched) one first
        empty_device_cache(model)
        by_rows[rows] = RowCache(model.config, rows, capacity, device_of(model))
    return by_rows[rows]


def empty_device_cache(model) -> None:
    if device_of(model).type == "cuda":
        torch.cuda.empty_cache()  # what was freed shows as free memory to the next measurement


def decode_step(
    model,
    cache: RowCache,
    ids: Tensor,
    keep: int,
    cache_kw: str,
    impl: str,
    vocab: int,
    warp,
    u: Tensor | None,
    want_logits: bool,
):
    """One forward of `ids` [B, n] at the rows' positions, then the warped probabilities of the last `keep`
    positions (over the first `vocab` ids) and, given uniforms `u` [B, 1], a token [B, 1] sampled from the last:
    what a decode loop compiles, so warping and sampling run inside the compiled graph too. The raw logits
    come out only when asked (`want_logits`): under CUDA graphs every output is copied out after the call."""
    from cactus_bench.core.rules.base import sample_column

    positions, at = cache.query(ids.shape[1])
    mask = cache.masks(at, model.dtype, impl)
    out = model.forward(
        input_ids=ids,
        position_ids=positions,
        attention_mask=mask,
        use_cache=True,
        logits_to_keep=keep,
        **{cache_kw: cache},
    )
    logits = out.logits if out.logits.shape[-1] == vocab else out.logits[..., :vocab]  # a slice is an op
    probs = warp(logits)
    # the last position's token, [B, 1] (`u` [B, 1]): what the next step is fed, as it is
    token = sample_column(probs[:, -1], u) if u is not None else None
    return (logits if want_logits else None), probs, token


class ModelRunner:
    """A model, its row cache, and its forward (eager or compiled). `compile` names a torch.compile backend
    (inductor for speed; `eager` traces with dynamo only, which tests use to count recompiles)."""

    def __init__(self, model, rows: int, capacity: int, compile: str | None = None, timer: ForwardTimer | None = None):
        impl = model.config._attn_implementation
        if impl not in MASK_FORMATS:
            raise ValueError(
                f"the decode engine builds attention masks for {' and '.join(MASK_FORMATS)} attention; this model "
                f"uses {impl!r}: load it with attn_implementation='sdpa'"
            )
        self.model, self.impl = model, impl
        self.device = device_of(model)
        self.cache = pooled_cache(model, rows, capacity)
        self.rows, self.capacity = rows, self.cache.capacity
        self.timer = timer
        self.compile = compile
        self.cache_kw = cache_kwarg(model)
        self.graph_outputs = graphs.uses_cuda_graphs(model, compile)  # outputs live in CUDA graph memory
        self.grouped = uses_grouped_attention(model)  # GQA without per-step K/V copies (`attention.py`)

    def set_positions(self, starts: list[int] | Tensor) -> None:
        """Each row's next write position (a host list, or a tensor on the device; no sync)."""
        if not isinstance(starts, Tensor):
            starts = to_device(starts, torch.long, self.device)
        self.cache.pos.copy_(starts, non_blocking=True)

    def forward(
        self,
        ids: Tensor,
        reach: int,
        keep: int,
        vocab: int,
        warp,
        u: Tensor | None = None,
        logits: bool = False,
        advance: bool = True,
    ) -> tuple[Tensor | None, Tensor, Tensor | None]:
        """Run `ids` [B, n] at the rows' positions and advance them by n (unless the caller sets them before
        the next forward anyway: `advance=False` saves an op): the last `keep` positions' logits
        (only if `logits`) and warped probabilities, and with uniforms `u` [B, 1] a token [B, 1] sampled from the last
        (`decode_step`). `reach` is the longest row's end after this forward."""
        args = (self.model, self.cache, ids, keep, self.cache_kw, self.impl, vocab, warp, u, logits)
        out = self.run(decode_step, args, reach)
        if advance:
            self.cache.pos.add_(ids.shape[1])
        return out

    def run(self, program, args: tuple, reach: int, forwards: int = 1) -> tuple:
        """`program(*args)` (its first two arguments: this runner's model and cache; it returns a tuple of
        tensors or None), compiled whole by a compiled runner, its forwards reading the key bucket of `reach`
        (the longest row's end after them: a host-side number, so the bucket is picked without reading the
        device). `forwards`: the model forwards it makes (the timer counts them). What it returns is the
        caller's to keep: never graph memory."""
        timer = self.timer
        if timer is not None:
            timer._wait(self.device)
            start = time.perf_counter()
        self.cache.kv_len = kv_bucket(reach, self.capacity)
        emulated = graphs.OVERWRITE["on"]
        if emulated:
            graphs.overwrite_previous()
        with grouped_attention(self.model, self.grouped):
            out = self._compiled(program, args) if self.compile else program(*args)
        if emulated:
            graphs.OVERWRITE["pending"] = [t for t in out if t is not None]
        if self.graph_outputs or emulated:
            out = graphs.copy_out(out)
        if timer is not None:
            timer._wait(self.device)
            timer.seconds += time.perf_counter() - start
            timer.calls += forwards
        return out

    def signature(self, program, args: tuple) -> tuple:
        """Everything a compiled program's guards check that can differ between this runner's calls: the
        program, its arguments (tensors by layout: a draft's uniforms are column views whose stride is 2m + 1;
        an object with a `trace_key`, a rule, by it; the rest by value), the key bucket, the cache, and the
        global state dynamo guards."""
        cache, weights = self.cache, self.model.get_input_embeddings().weight
        return (
            program.__name__, self.compile, tuple(graphs.argument_key(a) for a in args[2:]), cache.kv_len, id(cache),
            cache.capacity, self.grouped, weights.dtype, weights.device,
            torch.get_num_threads(), torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
        )  # fmt: skip

    def _compiled(self, program, args: tuple) -> tuple:
        """The compiled program of this call's signature (`graphs.compiled_call`)."""
        assert self.compile is not None  # only compiled runners call this
        where = f"rows {self.rows}, {self.cache.kv_len} keys"
        return graphs.compiled_call(program, self.model, self.compile, self.signature(program, args), args, where)

    def prefill(self, rows: list[int], prompts: list[list[int]]) -> None:
        """Fill each row with the keys/values of its tokens (positions 0..len-1): one eager forward of those
        rows alone, right-padded (a padded position holds garbage past the row's end, which the forward that
        first reaches that position overwrites before anything attends to it)."""
        todo = [(r, p) for r, p in zip(rows, prompts) if p]
        if not todo:
            return
        width = max(len(p) for _, p in todo)
        cache, kv_len = self.cache, self.cache.kv_len
        try:
            with torch.profiler.record_function(PREFILL), grouped_attention(self.model, self.grouped):
                ids = torch.tensor([p + [0] * (width - len(p)) for _, p in todo], device=self.device)
                positions = torch.arange(width, device=self.device).expand(len(todo), width)
                cache.prefill_rows, cache.kv_len = torch.tensor([r for r, _ in todo], device=self.device), width
                mask = cache.masks(positions.view(len(todo), 1, width, 1), self.model.dtype, self.impl)
                kw = {self.cache_kw: cache, "use_cache": True, "logits_to_keep": 1}
                self.model.forward(input_ids=ids, position_ids=positions, attention_mask=mask, **kw)
        finally:
            cache.prefill_rows, cache.kv_len = None, kv_len

    def row_keys(self, row: int, length: int) -> list[tuple[Tensor, Tensor]]:
        """What the cache holds for a row's first `length` positions, per layer (tests compare it with a
        fresh forward)."""
        layers = [layer for layer in self.cache.layers if isinstance(layer, RowLayer)]
        return [(layer.keys[row, :, :length], layer.values[row, :, :length]) for layer in layers]

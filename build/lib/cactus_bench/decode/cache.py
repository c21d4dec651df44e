"""A causal LM with its own KV cache: fed only the committed tokens its cache lacks, rolled back by crop.

Eager: a DynamicCache (grows by concatenation, rollback slices). Fast path: a preallocated StaticCache
(rollback moves the write position back, copying nothing) and compiled forwards for the steady-state
shapes; the prefill and the short final rounds stay eager, so a run never recompiles.
"""

from __future__ import annotations

import inspect
import time
import weakref
from collections.abc import Callable

import torch
from torch import Tensor
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, StaticLayer, StaticSlidingWindowLayer

# One graph per (shape, cache-size bucket): more than dynamo's default of 8 per function. Applied only
# around our compiled calls, never to the process's other compiled code.
RECOMPILE_LIMIT = 64
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its compiled forward


def compiled_forward(model: torch.nn.Module) -> Callable:
    """torch.compile of the model's forward (CUDA graphs on GPU: launch-bound drafters need them), made once
    per model and kept while the model lives. The compiled function is the class's forward called with the
    model as its first argument, so the map's value holds no reference that would keep the model alive."""
    if model not in _COMPILED:
        mode = "reduce-overhead" if device_of(model).type == "cuda" else None
        _COMPILED[model] = torch.compile(type(model).forward, mode=mode, dynamic=False)
    return _COMPILED[model]


class ForwardTimer:
    """Accumulates the wall time of decode forwards (prefill excluded); pass it as `forward_timer=` to the
    generate functions. `sync` waits for the device around each forward, which costs time on CUDA."""

    def __init__(self, sync: bool = False):
        self.sync = sync
        self.seconds = 0.0
        self.calls = 0

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def _wait(self, device: torch.device) -> None:
        if self.sync and device.type == "cuda":
            torch.cuda.synchronize(device)


class CachedModel:
    """A model, its KV cache and how many tokens the cache holds.

    `static_len` preallocates a static cache of that many positions; `compiled` lists the (new tokens,
    logits kept) shapes that run compiled (the steady state of a decode loop).
    """

    def __init__(
        self,
        model,
        device: torch.device,
        static_len: int | None = None,
        compiled: frozenset[tuple[int, int]] = frozenset(),
        timer: ForwardTimer | None = None,
    ):
        self.model = model
        self.device = device
        self.static = static_len is not None
        self.cache = rollback_safe_cache(model.config, static_len)
        self.cached = 0  # tokens the cache holds (kept here: asking the cache is slower)
        self.compiled = compiled
        self.timer = timer
        self._compiled = compiled_forward(model) if compiled else None
        # transformers 5.24 renamed past_key_values -> cache; 5.17 (the GPU box) may predate it.
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def forward(self, new: Tensor, keep: int, prefill: bool = False) -> Tensor:
        """Run `new` [1, n] on top of the cache; return the last `keep` logits [1, keep, V]."""
        timer = None if prefill else self.timer
        if timer is not None:
            timer._wait(self.device)
            start = time.perf_counter()
        n = new.shape[1]
        kw = {self._cache_kw: self.cache}
        if self.static:  # positions are explicit with a preallocated cache
            kw["cache_position"] = torch.arange(self.cached, self.cached + n, device=self.device)
        if (n, keep) in self.compiled and not prefill:
            with torch._dynamo.config.patch(cache_size_limit=RECOMPILE_LIMIT):
                out = self._compiled(self.model, input_ids=new, use_cache=True, logits_to_keep=keep, **kw)
        else:
            out = self.model.forward(input_ids=new, use_cache=True, logits_to_keep=keep, **kw)
        self.cached += n
        if timer is not None:
            timer._wait(self.device)
            timer.seconds += time.perf_counter() - start
            timer.calls += 1
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


def rollback_safe_cache(config, static_len: int | None):
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


def static_cache_len(needed: int) -> int:
    """Static caches come in sizes rounded up to 256 tokens, so prompts of different lengths reuse the
    same compiled graphs (their shapes include the cache size)."""
    return -(-needed // 256) * 256  # waste (attention over unused slots) stays small


def device_of(model) -> torch.device:
    return model.get_input_embeddings().weight.device

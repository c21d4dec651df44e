"""The KV cache a vLLM engine reserves, sized from what the run needs: its rows (the batch size) times the
longest sequence the engine admits (`max_model_len`: the prompt room and the reply), for the verifier's and
the drafter's layers. vLLM's own default reserves a share of the whole device, on a CPU a share of the
machine's memory (`gpu_memory_utilization`, 0.92): a 135M pair took 19.7 GB of a 24 GB machine, or refused
to start where one NUMA node held less. `engine.settings.kv_cache_gib` still sets it by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cactus_bench.core.decode.api import ModelLoadError

BLOCK_TOKENS = 128  # vLLM's largest KV block (its CPU backend's): a row's tokens round up to whole blocks
MARGIN = 1.1  # the drafter's look-ahead slots and the scheduler's rounding
AUTO_ROWS = 256  # batch_size=auto: vLLM's scheduler may fill this many rows
AUTO_SHARE = 0.5  # ... within this share of the free memory


@dataclass(frozen=True)
class KVCache:
    bytes: int
    rows: int
    tokens: int
    bytes_per_token: int

    def describe(self) -> str:
        return (
            f"{self.bytes / 2**30:.2f} GiB for {self.rows} row(s) × {self.tokens} tokens × "
            f"{self.bytes_per_token / 1024:.1f} KiB a token (verifier and drafter layers)"
        )


def bytes_per_token(config, itemsize: int) -> int:
    """K and V of every layer for one token, from a transformers config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * itemsize


def sized(configs: list, itemsize: int, rows: int, tokens: int) -> KVCache:
    per_token = sum(bytes_per_token(c, itemsize) for c in configs)
    blocks = math.ceil(tokens / BLOCK_TOKENS) * BLOCK_TOKENS
    return KVCache(int(rows * blocks * per_token * MARGIN), rows, tokens, per_token)


def plan(configs: list, itemsize: int, batch_size, tokens: int, free: int) -> KVCache:
    """The cache for `batch_size` rows (auto: as many as fit `AUTO_SHARE` of the free memory, at most
    `AUTO_ROWS`), refused in one paragraph when it does not fit the `free` bytes."""
    one = sized(configs, itemsize, 1, tokens)
    if batch_size == "auto":
        rows = max(1, min(AUTO_ROWS, int(free * AUTO_SHARE // max(one.bytes, 1))))
    else:
        rows = int(batch_size)
    cache = sized(configs, itemsize, rows, tokens)
    if cache.bytes > free:
        raise ModelLoadError(
            f"vLLM's KV cache for this run needs {cache.describe()}, more than the {free / 2**30:.2f} GiB free "
            "here. Lower batch_size, or the longest sequence (engine.settings.max_model_len, now "
            f"{tokens}), or set the cache by hand (engine.settings.kv_cache_gib=...)."
        )
    return cache


def free_bytes(on_gpu: bool) -> int:
    """Memory a new engine may take: the GPU's free memory, or the machine's available memory."""
    if on_gpu:
        import torch

        return int(torch.cuda.mem_get_info()[0])
    import psutil

    return int(psutil.virtual_memory().available)

"""The KV cache a vLLM engine reserves, sized from what the run needs: its rows (the batch size) times the
longest sequence the engine admits (`max_model_len`: the prompt room and the reply), for the verifier's and
the drafter's layers. vLLM's own default reserves a share of the whole device, on a CPU a share of the
machine's memory (`gpu_memory_utilization`, 0.92): a 135M pair took 19.7 GB of a 24 GB machine, or refused
to start where one NUMA node held less. `engine.settings.kv_cache_gib` still sets it by hand.

What must fit is the models' weights and the cache together, and with `tensor_parallel_size` = t each GPU
holds a t-th of both: the plan checks a device's share against its free memory, and vLLM is given the cache
per device (its `kv_cache_memory_bytes`)."""

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
    bytes: int  # over every device
    rows: int
    tokens: int
    bytes_per_token: int
    devices: int = 1  # the GPUs the models are sharded over (tensor_parallel_size)

    @property
    def per_device(self) -> int:
        return self.bytes // self.devices

    def describe(self) -> str:
        shared = f", {self.per_device / 2**30:.2f} GiB on each of {self.devices} GPUs" if self.devices > 1 else ""
        return (
            f"{self.bytes / 2**30:.2f} GiB for {self.rows} row(s) × {self.tokens} tokens × "
            f"{self.bytes_per_token / 1024:.1f} KiB a token (verifier and drafter layers{shared})"
        )


def bytes_per_token(config, itemsize: int) -> int:
    """K and V of every layer for one token, from a transformers config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * itemsize


def weight_bytes(config, itemsize: int) -> int:
    """A dense decoder's weights from its config: embeddings (and an untied head), and per layer the
    attention's projections and a gated MLP (norms and biases are a rounding error)."""
    hidden, heads = config.hidden_size, config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * (getattr(config, "intermediate_size", None) or 4 * hidden)
    tied = getattr(config, "tie_word_embeddings", True)
    return itemsize * (config.vocab_size * hidden * (1 if tied else 2) + config.num_hidden_layers * (attention + mlp))


def sized(configs: list, itemsize: int, rows: int, tokens: int, devices: int = 1) -> KVCache:
    per_token = sum(bytes_per_token(c, itemsize) for c in configs)
    blocks = math.ceil(tokens / BLOCK_TOKENS) * BLOCK_TOKENS
    return KVCache(int(rows * blocks * per_token * MARGIN), rows, tokens, per_token, devices)


def plan(configs: list, itemsize: int, batch_size, tokens: int, free: int, devices: int = 1) -> KVCache:
    """The cache for `batch_size` rows (auto: as many as fit `AUTO_SHARE` of what the weights leave free, at
    most `AUTO_ROWS`), refused in one paragraph when a device's share of the weights and the cache does not
    fit its `free` bytes; `devices`: the GPUs both are sharded over."""
    weights = sum(weight_bytes(c, itemsize) for c in configs)
    left = devices * free - weights  # over every device
    one = sized(configs, itemsize, 1, tokens, devices)
    if batch_size == "auto":
        rows = max(1, min(AUTO_ROWS, int(max(left, 0) * AUTO_SHARE // max(one.bytes, 1))))
    else:
        rows = int(batch_size)
    cache = sized(configs, itemsize, rows, tokens, devices)
    if (weights + cache.bytes) / devices > free:
        raise ModelLoadError(
            f"vLLM needs {weights / devices / 2**30:.2f} GiB of weights and a KV cache of {cache.describe()} "
            f"on each device, more than the {free / 2**30:.2f} GiB free there. Lower batch_size, or the longest "
            f"sequence (engine.settings.max_model_len, now {tokens}), spread the models over more GPUs "
            "(pair.tensor_parallel_size), or set the cache by hand (engine.settings.kv_cache_gib=...)."
        )
    return cache


def free_bytes(on_gpu: bool) -> int:
    """Memory a new engine may take: the GPU's free memory, or the machine's available memory."""
    if on_gpu:
        import torch

        return int(torch.cuda.mem_get_info()[0])
    import psutil

    return int(psutil.virtual_memory().available)

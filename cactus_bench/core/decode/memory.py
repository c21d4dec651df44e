"""The memory model behind batch_size=auto (docs/gpu.md): what a row costs on the device, and how many
rows a process plans for, chosen once per pair and process."""

from __future__ import annotations

import logging
import os
import weakref
from dataclasses import dataclass

import torch

from cactus_bench.core.decode.cache import POOL, device_of, empty_device_cache

log = logging.getLogger("cactus_bench")


def bytes_per_position(model) -> int:
    """Key and value bytes one cached position costs across the model's layers (the KV read per token of
    context and row)."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * torch.finfo(model.dtype).bits // 8


def free_bytes(device: str) -> int | None:
    """Memory free for weights on `device` (CUDA: the card's free memory; CPU: available RAM)."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    return available_ram()


def available_ram(meminfo: str = "/proc/meminfo") -> int | None:
    """RAM a new allocation can take: Linux's MemAvailable, which counts the page cache the kernel gives back
    (MemFree, sysconf's AVPHYS_PAGES, does not: after a large install it reads a few hundred MB on an idle
    24 GiB machine); None where the system reports neither."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that reports it
        return None


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


MAX_AUTO_ROWS = {"cuda": 64, "cpu": 16}  # past these a step is compute-bound: more rows add latency only


@dataclass(frozen=True)
class RowsChoice:
    rows: int
    per_row: int  # bytes each row was budgeted (caches of the models, the round's tensors)


_ROWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # verifier -> RowsChoice


def activation_bytes(model, tokens: int) -> int:
    """One layer's transient tensors for `tokens` tokens of a row (residual stream, attention projections,
    the MLP's gate/up/down): layers run one after the other, so one layer's worth is live at a time."""
    c = model.config
    return tokens * (4 * c.hidden_size + 3 * c.intermediate_size) * torch.finfo(model.dtype).bits // 8


def row_bytes(models: list, capacity: int, lookahead: int, vocab: int, prompt: int = 0) -> int:
    """What one row costs on the device (the memory model behind batch_size=auto, docs/gpu.md):
    - its caches: capacity x K/V bytes per position of each model;
    - a round's float32 tensors: (lookahead + 1) x vocab logits, probabilities and warp temporaries (6 copies);
    - CUDA graphs' private pool: each graph's static outputs (probabilities, 2 copies with the copy-out) and
      the activations of its widest forward (lookahead + 1 tokens);
    - the prefill of an admitted row (rows are admitted together: one forward of all their prompts).
    Attention holds no per-head K/V copy (`attention.py`). Weights are loaded already: not counted."""
    kv = capacity * sum(bytes_per_position(m) for m in models)
    round_tensors = 6 * (lookahead + 1) * vocab * 4
    graph_pool = 2 * (lookahead + 1) * vocab * 4 + max(activation_bytes(m, lookahead + 1) for m in models)
    prefill = max(activation_bytes(m, prompt) for m in models)
    return kv + round_tensors + graph_pool + prefill


def gpu_share() -> float:
    """The share of the device's free memory one process may plan for: 80 %, divided among the runs that
    share the GPU (`slots_per_gpu=k` sets CACTUS_BENCH_SLOTS_PER_GPU for each of them)."""
    return 0.8 / max(1, int(os.environ.get("CACTUS_BENCH_SLOTS_PER_GPU", "1")))


def rows_for(models: list, capacity: int, lookahead: int, vocab: int, prompt: int = 0) -> int:
    """batch_size=auto: rows chosen once per verifier and process, so every run of a local sweep decodes at
    the same batch size and reuses the same caches and compiled graphs. Chosen again only when a run needs
    more per row than was budgeted (a longer budget, or a drafter after the verifier alone): then the
    models' pooled caches are freed first, so they are not counted as used."""
    need = row_bytes(models, capacity, lookahead, vocab, prompt)
    chosen = _ROWS.get(models[0])
    if chosen is not None and chosen.per_row >= need:
        return chosen.rows
    for model in models:
        POOL.pop(model, None)
        empty_device_cache(model)
    rows = auto_rows(models, need)
    if chosen is not None:
        log.info(
            "batch_size=auto: %d rows (was %d: this run needs %d bytes a row, not %d)",
            rows,
            chosen.rows,
            need,
            chosen.per_row,
        )
    else:
        log.info("batch_size=auto: %d rows fit (capacity %d positions each)", rows, capacity)
    _ROWS[models[0]] = RowsChoice(rows, need)
    return rows


def auto_rows(models: list, per_row: int, share: float | None = None) -> int:
    """The most rows of `per_row` bytes that fit `share` (default `gpu_share()`) of the device's free
    memory (weights are already loaded, so they are not counted again)."""
    device = device_of(models[0])
    free = free_bytes(str(device))
    if free is None:
        return 1
    share = gpu_share() if share is None else share
    return max(1, min(MAX_AUTO_ROWS.get(device.type, 16), int(share * free // per_row)))

"""Grouped-query attention for the decode engine without copying keys and values per query head.

transformers' SDPA path, given a mask (the engine always passes one: rows sit at their own positions),
expands K/V to every query head (`repeat_kv`) before attention: at a 4,096-key bucket a Qwen3-0.6B drafter
step then moves about twice as many bytes of K/V as of weights. Here the query heads that share a K/V head
are folded into the query-length axis instead ([B, H_q, n, D] -> [B, H_kv, groups x n, D]) and the mask is
repeated over the groups (n x keys booleans a row, not H_q x keys x D values), so attention reads each K/V
head once, in any SDPA kernel that takes a mask, compiled or not. The same arithmetic per head: the logits
equal the stock path's to float rounding (tested).

The engine switches a model to it only for its own forwards (`grouped_attention`), so the model outside the
engine (transformers' `generate`, a user's code) keeps its configured implementation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GROUPED_SDPA = "cactus_grouped_sdpa"


def grouped_sdpa_forward(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    groups = getattr(module, "num_key_value_groups", 1)
    if attention_mask is None or groups == 1 or attention_mask.dim() != 4 or attention_mask.shape[1] != 1:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    B, heads, n, _ = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    folded = query.reshape(B, kv_heads, groups * n, query.shape[-1])  # head h uses K/V head h // groups
    rows = attention_mask.shape[0]
    mask = attention_mask[..., :keys].expand(rows, groups, n, keys).reshape(rows, 1, groups * n, keys)
    out = torch.nn.functional.scaled_dot_product_attention(
        folded, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(B, heads, n, value.shape[-1]).transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)  # masks transformers builds for it: SDPA's


@contextlib.contextmanager
def grouped_attention(model, enabled: bool) -> Iterator[None]:
    """Run the model's SDPA attention as `grouped_sdpa_forward` for the duration (the engine's forwards)."""
    if not enabled:
        yield
        return
    config = model.config
    before = config._attn_implementation
    _set_implementation(config, GROUPED_SDPA)
    try:
        yield
    finally:
        _set_implementation(config, before)


def _set_implementation(config, name: str) -> None:
    """The config's attention implementation, set twice a forward: straight into the attribute its property
    reads where there is one and no sub-config to follow (the property's setter validates and recurses:
    ~20 µs a call, a tenth of a tiny model's step)."""
    if "_attn_implementation_internal" in vars(config) and not config.sub_configs:
        object.__setattr__(config, "_attn_implementation_internal", name)
    else:
        config._attn_implementation = name


def uses_grouped_attention(model) -> bool:
    """SDPA models whose query heads share K/V heads (every Qwen3, Llama 3 and Gemma-2 of the paper)."""
    c = model.config
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return c._attn_implementation == "sdpa" and kv_heads < c.num_attention_heads

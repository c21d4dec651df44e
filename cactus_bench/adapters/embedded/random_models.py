"""Small random causal LMs built in memory: the embedded pair's starting point, and the models of tests and
benchmarks."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig


def qwen3_shape(
    vocab_size: int,
    hidden_size: int,
    layers: int,
    heads: int,
    kv_heads: int,
    *,
    intermediate_size: int | None = None,
    max_positions: int = 512,
    tie_word_embeddings: bool = False,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    **extra,
) -> dict:
    """The config keywords of a small Qwen3 (head_dim = hidden / heads, no BOS): one description shared by
    the random models of tests and benchmarks and the embedded pair's trained ones."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 3 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden_size // heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        **extra,
    )


def random_lm(
    config: PretrainedConfig | str,
    seed: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    logit_scale: float = 1.0,
    **shape,
):
    """A random-initialised causal LM, built in memory (no download), in eval mode: from a config, or from an
    architecture name (`qwen3`, `gemma2`, `llama`, ...) and its shape (config keyword arguments).

    `logit_scale` multiplies the LM head, so a random model's next-token distributions are peaked rather
    than near-uniform (a near-uniform pair makes every statistical test powerless)."""
    if isinstance(config, str):
        config = AutoConfig.for_model(config, **shape)
    torch.manual_seed(seed)
    with torch.device(device or "cpu"):
        model = AutoModelForCausalLM.from_config(config)
    if logit_scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(logit_scale)
    return model.to(dtype).eval()

"""Tiny random models and pairs for the decode tests, built with the package's one builder (`random_lm`)."""

import torch

from cactus_bench.adapters.embedded.random_models import qwen3_shape, random_lm


def tiny_qwen3(
    vocab_size: int = 32,
    hidden_size: int = 32,
    num_layers: int = 1,
    heads: int = 2,
    kv_heads: int = 1,
    max_positions: int = 512,
    seed: int = 0,
    logit_scale: float = 1.0,
    init_std: float = 0.02,
):
    """A random Qwen3, fp32. `logit_scale` peaks its next-token distributions; a larger `init_std` makes
    attention sharper, so the output depends more on the context."""
    shape = qwen3_shape(vocab_size, hidden_size, num_layers, heads, kv_heads, max_positions=max_positions)
    return random_lm("qwen3", seed, logit_scale=logit_scale, initializer_range=init_std, **shape)


def tiny_pair(vocab_size=32, seed=0, logit_scale=40.0, max_positions=512, init_std=0.02):
    """A (drafter, verifier) pair of tiny random Qwen3 models sharing a vocabulary."""
    kw = {"logit_scale": logit_scale, "max_positions": max_positions, "init_std": init_std}
    return tiny_qwen3(vocab_size, 16, 1, seed=seed, **kw), tiny_qwen3(vocab_size, 32, 2, seed=seed + 1, **kw)


WINDOW = 6  # tokens; the sliding-window families' runs go far past it
SLIDING = ("gemma2", "mistral")  # Gemma-2 alternates sliding and full layers; Mistral slides everywhere


def tiny_family(arch: str, hidden: int, seed: int):
    """A 2-layer random model of `arch` (gemma2, mistral, llama3, qwen2), float64, with a tiny sliding window
    or Llama 3's rope scaling."""
    extra = {"sliding_window": WINDOW} if arch in SLIDING else {}
    if arch == "llama3":  # Llama 3.1/3.2's rope scaling; an 8-token original context rescales most frequencies
        extra["rope_parameters"] = {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        }
    # float64 (Gemma-2's eager softmax stays float32: errors ~1e-6)
    return random_lm(
        "llama" if arch == "llama3" else arch,
        seed,
        dtype=torch.float64,
        logit_scale=30.0,
        vocab_size=24,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden // 2,
        max_position_embeddings=512,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        initializer_range=0.5,
        **extra,
    )

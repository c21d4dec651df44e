"""Synthetic pairs for speed benchmarks: real model shapes with random weights (no download)."""

from __future__ import annotations

import torch

from cactus_bench.adapters.embedded.random_models import qwen3_shape, random_lm

SHAPES = {  # the real Qwen3 shapes (config.json of the hub models), and small ones for CPU dry runs
    "qwen3-0.6b": dict(
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen3-8b": dict(
        hidden_size=4096,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=12288,
        vocab_size=151936,
        tie_word_embeddings=False,
    ),
    "small-drafter": dict(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=384,
        vocab_size=4096,
        tie_word_embeddings=True,
    ),
    "small-verifier": dict(
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        intermediate_size=1536,
        vocab_size=4096,
        tie_word_embeddings=False,
    ),
}


def qwen3_of_shape(shape: str, seed: int, dtype=torch.float32, device=None):
    """A random Qwen3 with one of SHAPES (8k context, Qwen3's rope base, no special tokens)."""
    return random_lm(
        "qwen3",
        seed,
        dtype=dtype,
        device=device,
        **SHAPES[shape],
        max_position_embeddings=8192,
        rope_theta=1e6,
        eos_token_id=None,
        bos_token_id=None,
    )


def self_speculative_pair(
    vocab_size: int,
    hidden_size: int,
    verifier_layers: int,
    *,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate_size: int | None = None,
    later_layer_scale: float = 0.05,
    logit_scale: float = 20.0,
    max_positions: int = 4096,
    seed: int = 0,
):
    """A random verifier and a 1-layer drafter that is its first layer (self-speculative style).

    The verifier's later layers write a scaled-down update into the residual stream, so the two agree
    often, as a trained drafter/verifier pair does; random pairs otherwise accept almost nothing, which
    makes speed comparisons meaningless."""
    shape = qwen3_shape(
        vocab_size, hidden_size, verifier_layers, heads, kv_heads, intermediate_size=intermediate_size,
        max_positions=max_positions,
    )  # fmt: skip
    verifier = random_lm("qwen3", seed + 1, logit_scale=logit_scale, **shape)
    drafter = random_lm("qwen3", seed, **{**shape, "num_hidden_layers": 1})
    with torch.no_grad():
        for layer in verifier.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(later_layer_scale)
            layer.mlp.down_proj.weight.mul_(later_layer_scale)
        drafter.model.embed_tokens.weight.copy_(verifier.model.embed_tokens.weight)
        drafter.model.layers[0].load_state_dict(verifier.model.layers[0].state_dict())
        drafter.model.norm.weight.copy_(verifier.model.norm.weight)
        drafter.lm_head.weight.copy_(verifier.lm_head.weight)
    return drafter, verifier


# CPU benchmark pairs: a verifier of >= 20 ms a forward on a 2-core CPU (compute-bound), a launch-bound one
# (forwards of a few ms: the loop's own work decides the speed, as for a GPU user's drafter), and the tiny
# test size.
PAIRS = {
    "cpu50m": lambda: self_speculative_pair(4096, 640, 10, heads=10, kv_heads=5, intermediate_size=1920),
    "launch": lambda: self_speculative_pair(2048, 256, 8, heads=4, kv_heads=2),
    "tiny": lambda: self_speculative_pair(512, 64, 2, heads=4, kv_heads=2),
}

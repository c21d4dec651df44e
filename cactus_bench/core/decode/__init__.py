"""The decode engine: the `Decoder` and `Backend` interfaces (`api`), the transformers backend (`hf`),
round statistics (`stats`), models with their row caches (`cache`), the batched loops (`engine`) and their
one-request functional form (`loops`).

Names are loaded on first use, so the interface (and config validation, which reads the backends'
registry) does not import transformers."""

import importlib

_WHERE = {
    "BACKENDS": "api",
    "Backend": "api",
    "DecodeSpec": "api",
    "Decoder": "api",
    "ModelLoadError": "api",
    "ModelSpec": "api",
    "Generation": "api",
    "PairedDecoder": "api",
    "PairedGroup": "api",
    "paired_decoder": "api",
    "Request": "api",
    "build_decoder": "api",
    "stable_seed": "api",
    "ForwardTimer": "cache",
    "ModelRunner": "cache",
    "kv_bucket": "buckets",
    "Engine": "engine",
    "EngineOptions": "engine",
    "Job": "engine",
    "DecodeOptions": "loops",
    "autoregressive_generate": "loops",
    "speculative_generate": "loops",
    "GenerationOutput": "stats",
    "Rounds": "stats",
    "Warper": "warp",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)

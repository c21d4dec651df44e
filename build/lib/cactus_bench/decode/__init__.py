"""The decode engine in three rooms: round statistics (`stats`), models with their KV caches (`cache`), and
the speculative and autoregressive loops (`loops`)."""

from .cache import CachedModel, ForwardTimer, static_cache_len
from .loops import DecodeOptions, autoregressive_generate, speculative_generate
from .stats import GenerationOutput, Rounds
from .warp import Warper

__all__ = [
    "CachedModel",
    "DecodeOptions",
    "ForwardTimer",
    "GenerationOutput",
    "Rounds",
    "Warper",
    "autoregressive_generate",
    "speculative_generate",
    "static_cache_len",
]

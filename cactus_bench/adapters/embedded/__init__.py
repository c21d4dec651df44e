"""The embedded offline pairs, made on first use and cached: `tiny` (the synthetic `arith` task and a tiny
drafter/verifier trained on it, shipped with the package) and `smollm2` (a real chat model, SmolLM2-135M-
Instruct from its PyPI wheel, and a lossy drafter derived from it). A config names one as
`embedded:<pair>/<role>`. Importing this package loads nothing heavy (`recipes` names the pairs without
torch); building one does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cactus_bench.adapters.embedded.recipes import FOLDERS, SPEC, default_cache_dir

PREFIX = "embedded:"


def ensure(pair: str, cache: str | Path | None = None, log: Callable[[str], None] = print) -> Path:
    """The embedded pair's folder, made first if it is missing, partial or corrupt."""
    if pair == "tiny":
        from cactus_bench.adapters.embedded.install import ensure_pair

        return ensure_pair(cache, log=log)
    from cactus_bench.adapters.embedded.smollm2 import ensure_smollm2

    return ensure_smollm2(cache, log=log)


def split(name: str) -> tuple[str, str]:
    """`embedded:<pair>/<role>` -> (pair, role), the pair checked."""
    pair, _, role = name[len(PREFIX) :].partition("/")
    if pair not in FOLDERS:
        raise ValueError(f"unknown embedded pair {pair!r} in {name!r}: choose one of {', '.join(FOLDERS)}")
    return pair, role


def resolve_model(name: str, cache: str | None = None, log: Callable[[str], None] = print) -> str:
    """`embedded:<pair>/<role>` -> that role's folder in the pair's cache (made on first use); other names
    (hub ids, folders, GGUF files) as they are."""
    if not name.startswith(PREFIX):
        return name
    pair, role = split(name)
    return str(ensure(pair, cache, log) / role)


def folder_name(name: str) -> str:
    """The cache folder an `embedded:<pair>/<role>` name stands for: its recipe, without making it."""
    return FOLDERS[split(name)[0]]()


__all__ = ["FOLDERS", "PREFIX", "SPEC", "default_cache_dir", "ensure", "folder_name", "resolve_model", "split"]

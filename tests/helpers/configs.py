"""Composing run configs the way the CLI does, optionally on a local pair and into a results folder."""

from cactus_bench.app.compose import compose


def pair_overrides(pair_dir) -> list[str]:
    """The embedded pair's code path on a small pair built for the tests, filed as `small` (not `tiny`: a
    stock pair's name is kept for its own models)."""
    return [f"pair.drafter={pair_dir / 'drafter'}", f"pair.verifier={pair_dir / 'verifier'}", "pair.name=small"]


def cfg_of(*overrides, results=None, pair_dir=None):
    """The composed config (a fresh copy: composition is cached); `results` is the runs folder."""
    extra = pair_overrides(pair_dir) if pair_dir is not None else []
    if results is not None:
        extra.append(f"paths.runs={results}")
    return compose((*overrides, *extra))

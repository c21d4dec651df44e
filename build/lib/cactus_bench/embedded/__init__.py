"""The embedded offline default: the synthetic `arith` task and a tiny drafter/verifier pair trained on
it locally (tokenizer included), built on first use and cached."""

from .build import SPEC, cache_problem, default_cache_dir, ensure_pair, pair_dir

__all__ = ["SPEC", "cache_problem", "default_cache_dir", "ensure_pair", "pair_dir"]

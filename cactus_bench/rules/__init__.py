"""Acceptance rules for speculative sampling (methods.md §3), built by name with `build_rule`.

Adding a rule: one module here defining a `Rule` subclass decorated with `@register("name")`, one
`conf/method/<name>.yaml`, and its oracle test.
"""

from . import cactus, interp, mentored, speccas, sps, tas, topk  # noqa: F401  (registers the rules)
from .base import Rule, check_probs, kl, sample_weights
from .registry import RULES, build_rule, register

__all__ = ["RULES", "Rule", "build_rule", "check_probs", "kl", "register", "sample_weights"]

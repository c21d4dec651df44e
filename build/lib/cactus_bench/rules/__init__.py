"""Acceptance rules for speculative sampling (methods.md §3), built by name with `build_rule`.

Adding a rule: one module here defining a `Rule` subclass decorated with `@register("name")` (every module
of this package is imported below), one `conf/method/<name>.yaml`, and its oracle test entry.
"""

import importlib
import pkgutil

from .base import Rule, Verification, check_probs, kl, sample_weights
from .registry import RULES, build_rule, register

for _module in pkgutil.iter_modules(__path__):  # importing a rule module registers its rules
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["RULES", "Rule", "Verification", "build_rule", "check_probs", "kl", "register", "sample_weights"]

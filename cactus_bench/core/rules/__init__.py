"""Acceptance rules for speculative sampling (methods.md §3), built by name with `build_rule`.

Adding a rule: one module here defining a `Rule` subclass decorated with `@register("name")` (every module
of this package is imported below; `method=<name>` is generated from its signature, app/method_configs.py),
and its reference law in tests/helpers/reference_laws.py.
"""

import importlib
import pkgutil

from cactus_bench.core.rules.base import Rule, Verification, check_probs, kl, sample_weights
from cactus_bench.core.rules.registry import RULES, build_rule, register

for _module in pkgutil.iter_modules(__path__):  # importing a rule module registers its rules
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["RULES", "Rule", "Verification", "build_rule", "check_probs", "kl", "register", "sample_weights"]

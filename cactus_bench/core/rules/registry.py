"""The rule registry: `@register("name")` on a `Rule` subclass, and `build_rule(name, **params)`."""

from __future__ import annotations

import inspect

from cactus_bench.core.registry import Registry
from cactus_bench.core.rules.base import Rule


def _check_rule(name: str, cls: type) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Rule)):
        raise TypeError(f"rule {name!r}: {cls!r} is not a Rule subclass")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise TypeError(f"rule {name!r}: {cls.__name__} does not implement {missing}")


RULES: Registry[type[Rule]] = Registry("acceptance rule", _check_rule, group="cactus_bench.rules")


def register(name: str):
    """Class decorator: register a rule under `name` (also set as its `name`, so it is written once)."""

    def deco(cls: type[Rule]) -> type[Rule]:
        RULES.add(name, cls)
        cls.name = name
        return cls

    return deco


def build_rule(name: str, **params) -> Rule:
    """Build a rule by its registered name; unknown names or parameters raise a ValueError."""
    cls = RULES.get(name)
    try:
        return cls(**params)
    except TypeError as e:
        raise ValueError(f"{name}: bad parameters {sorted(params)} ({e})") from None

"""Name -> rule class registry and `build_rule`."""

from __future__ import annotations

from .base import Rule

RULES: dict[str, type[Rule]] = {}


def register(name: str):
    def deco(cls: type[Rule]) -> type[Rule]:
        if name in RULES:
            raise ValueError(f"rule {name!r} registered twice")
        RULES[name] = cls
        return cls

    return deco


def build_rule(name: str, **params) -> Rule:
    """Build a rule by its registered name; unknown names or parameters raise a ValueError."""
    if name not in RULES:
        raise ValueError(f"unknown acceptance rule {name!r}; valid choices: {', '.join(sorted(RULES))}")
    cls = RULES[name]
    try:
        return cls(**params)
    except TypeError as e:
        raise ValueError(f"{name}: bad parameters {sorted(params)} ({e})") from None

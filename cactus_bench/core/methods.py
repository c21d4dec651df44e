"""A decoding method: an acceptance rule with its parameters and draft length, or the verifier alone.

The verifier-alone baseline (`ar`) is the one method that uses no drafter: every place that must treat it
differently asks the `Method` (`uses_drafter`, `is_baseline`) instead of comparing names. Core: torch and
transformers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cactus_bench.core.rules import RULES, Rule, build_rule

BASELINE = "ar"  # the verifier alone: the speedup denominator and the "Verifier" row of the tables


def method_names() -> list[str]:
    return [*RULES.names(), BASELINE]


def display_name(name: str) -> str:
    """How tables, figures and dashboards name a method: its rule's label (SpS, TAS, Cactus, ...), or
    "Verifier" for the verifier alone; a name not registered here is shown as it is."""
    if is_baseline(name):
        return "Verifier"
    return (RULES.get(name).label or name) if name in RULES.names() else name


def is_baseline(name: str) -> bool:
    """Whether a method name (e.g. from a stored run's config) is the verifier alone."""
    return name == BASELINE


@dataclass
class Method:
    """`name` is a registered rule or `ar`; `params` are the rule's; `m` the draft length (unused by `ar`)."""

    name: str
    params: dict = field(default_factory=dict)
    m: int = 10
    rule: Rule | None = field(init=False, repr=False, default=None)

    def __post_init__(self):
        if not self.is_baseline:
            self.rule = build_rule(self.name, **self.params)  # validates name and parameters up front

    @property
    def is_baseline(self) -> bool:
        return is_baseline(self.name)

    @property
    def uses_drafter(self) -> bool:
        return not self.is_baseline

    @property
    def tag(self) -> str:
        """A readable name for the method and its parameters, e.g. `cactus-delta0.75`."""
        parts = [self.name] + [f"{k}{v}" for k, v in sorted(self.params.items()) if v is not None]
        return "-".join(str(p).replace("/", "_") for p in parts)

    @property
    def run_name(self) -> str:
        """The tag with the draft length where it matters, e.g. `cactus-delta0.75_m10`, `ar`."""
        return f"{self.tag}_m{self.m}" if self.uses_drafter else self.tag

"""The `method` config group, generated from the registered rules: a rule's parameters and defaults are
declared once, in its signature. A parameter named as a top-level setting (`delta`) reads that setting, so
`method=cactus delta=0.75` works. Hydra imports this module when it composes (config.yaml's search path
names it), so `--help` stays free of torch; a YAML file in a config folder of the same name takes precedence."""

from __future__ import annotations

from dataclasses import fields
from inspect import Parameter, signature

from hydra.core.config_store import ConfigStore

from cactus_bench.app.schema import RunConfig
from cactus_bench.core.methods import BASELINE
from cactus_bench.core.rules import RULES


def method_node(name: str) -> dict:
    """`{"name": rule, "params": {parameter: default}}`, as `method=<name>` composes."""
    settings = {f.name for f in fields(RunConfig)}
    params = {}
    for p in signature(RULES.get(name)).parameters.values():
        if p.kind in (Parameter.VAR_POSITIONAL, Parameter.VAR_KEYWORD):
            continue
        params[p.name] = f"${{{p.name}}}" if p.name in settings else "???" if p.default is p.empty else p.default
    return {"name": name, "params": params}


_store = ConfigStore.instance()
_store.store(group="method", name=BASELINE, node={"name": BASELINE, "params": {}})
for _name in RULES.names():
    _store.store(group="method", name=_name, node=method_node(_name))

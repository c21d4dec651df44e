"""A name -> object registry that checks at registration and answers a typo with "did you mean".

Every extensible concept (acceptance rules, decode backends, metrics, dataset loaders, benchmark kinds) is
one of these, so adding one is a single decorated definition. A registry with an entry-point `group` is
also extended by installed packages, as pytest and lm-eval are: a package declares, in its pyproject,

    [project.entry-points."cactus_bench.rules"]
    my_rule = "my_package.rules"

and the first lookup imports `my_package.rules`, whose decorated definitions register themselves. This
project's built-in backends are declared the same way, in its own pyproject.toml.
Core: standard library only.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Names of one `kind` mapped to objects; `check(name, obj)` runs at registration and may raise."""

    def __init__(self, kind: str, check: Callable[[str, T], None] | None = None, group: str | None = None):
        self.kind = kind
        self.group = group  # the entry-point group installed packages extend it through
        self._check = check
        self._items: dict[str, T] = {}
        self._plugins_loaded = group is None

    def _load_plugins(self) -> None:
        """Import every module installed packages name in `group` (once; their definitions register)."""
        if self._plugins_loaded or self.group is None:
            return
        self._plugins_loaded = True
        for ep in group_entry_points(self.group):
            try:
                ep.load()
            except Exception as e:  # a broken plugin names itself instead of failing somewhere later
                raise ImportError(
                    f"{self.kind} plugin {ep.name!r} ({ep.value}, group {self.group}) failed to load: {e}"
                ) from e

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@REGISTRY.register("name")`."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{self.kind} name {name!r} must be a Python identifier (it is used in configs)")
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        if self._check is not None:
            self._check(name, obj)
        self._items[name] = obj

    def get(self, name: str) -> T:
        """The object registered as `name`; an unknown name raises a ValueError naming the close matches."""
        self._load_plugins()
        if name not in self._items and not self._items and self.group:
            raise ValueError(
                f"no {self.kind} is registered: no package declares one in the {self.group!r} entry points (this "
                "project declares its own there: a stale install lacks them; run `pip install -e .` again)"
            )
        if name not in self._items:
            raise ValueError(unknown_name_message(self.kind, name, self._items))
        return self._items[name]

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load_plugins()
        return len(self._items)

    def values(self) -> list[T]:
        self._load_plugins()
        return list(self._items.values())

    @contextmanager
    def scoped(self) -> Iterator[Registry[T]]:
        """Registrations made inside the block are undone on exit (tests register throwaway entries)."""
        saved = dict(self._items)
        try:
            yield self
        finally:
            self._items = saved


def group_entry_points(group: str) -> list[EntryPoint]:
    """The entry points installed packages declare in `group`. A checkout on the import path but not
    installed (the GPU box runs one: `python scripts/device_check.py`) adds those its pyproject.toml declares."""
    found = list(entry_points(group=group))
    try:
        distribution("cactus-bench")
    except PackageNotFoundError:
        found += _checkout_entry_points(group)
    return found


def _checkout_entry_points(group: str) -> list[EntryPoint]:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        import tomllib
    except ImportError:  # Python 3.10: install the package (pip install -e .) to read its entry points
        return []
    if not pyproject.is_file():
        return []
    declared = tomllib.loads(pyproject.read_text()).get("project", {}).get("entry-points", {}).get(group, {})
    return [EntryPoint(name, value, group) for name, value in declared.items()]


def unknown_name_message(kind: str, name: object, choices) -> str:
    close = difflib.get_close_matches(str(name), sorted(choices), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; valid choices: {', '.join(sorted(choices))}"

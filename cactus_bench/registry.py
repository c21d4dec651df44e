"""A name -> object registry that checks at registration and answers a typo with "did you mean".

Every extensible concept (acceptance rules, decode backends, metrics, dataset loaders, benchmark kinds) is
one of these, so adding one is a single decorated definition. A registry with an entry-point `group` is
also extended by installed packages, as pytest and lm-eval are: a package declares, in its pyproject,

    [project.entry-points."cactus_bench.rules"]
    my_rule = "my_package.rules"

and the first lookup imports `my_package.rules`, whose decorated definitions register themselves.
Core: standard library only.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
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
        for ep in entry_points(group=self.group):
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


def unknown_name_message(kind: str, name: object, choices) -> str:
    close = difflib.get_close_matches(str(name), sorted(choices), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; valid choices: {', '.join(sorted(choices))}"

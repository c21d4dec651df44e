"""One command-line convention for every tool, the run's own: `python -m cactus_bench.<tool> [WORD ...]
key=value ...`. A run takes Hydra overrides (`method=cactus delta=0.75`); the tools (sweep, plan, report,
score, dashboard, embedded) and the benchmark scripts take their settings the same way, with `--help`
generated from the same declaration, and a flag in another style (`--out x`) answered with its spelling
here (`out=x`). Pure Python: the core's scripts use it too."""

from __future__ import annotations

import difflib
import shlex
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class Key:
    """A setting: `name=value`, or a word in order when positional."""

    name: str
    help: str
    default: Any = None
    kind: type = str  # str, int, float, bool, or list (comma-separated)
    required: bool = False
    choices: tuple[str, ...] = ()
    item: type = str  # a list's items

    def convert(self, text: str) -> Any:
        if self.kind is list:
            return [
                Key(self.name, self.help, kind=self.item, choices=self.choices).convert(v) for v in text.split(",") if v
            ]
        if self.choices and text not in self.choices:
            raise ValueError(f"choose one of {', '.join(self.choices)}")
        if self.kind is bool:
            if text.lower() not in TRUE + FALSE:
                raise ValueError("true or false")
            return text.lower() in TRUE
        try:
            return self.kind(text)
        except ValueError:
            raise ValueError(f"a{'n' if self.kind is int else ''} {self.kind.__name__}") from None


class Args(SimpleNamespace):
    """The parsed settings as attributes (`vars(args)`: all of them), and `overrides`: the Hydra overrides
    passed through. A namespace, not a dict, so a setting may be named `items` or `keys`."""

    overrides: list[str]


@dataclass(frozen=True)
class Command:
    prog: str  # how it is called: `python -m cactus_bench.tools.plan`
    about: str  # what it does: the help's text below the usage line
    positional: tuple[Key, ...] = ()
    keys: tuple[Key, ...] = ()
    overrides: str | None = None  # what any other key=value means (Hydra overrides); None: refused
    examples: tuple[str, ...] = field(default=())

    def usage(self) -> str:
        words = [k.name.upper() if k.required else f"[{k.name.upper()}]" for k in self.positional]
        keys = [f"{k.name}=..." if k.required else f"[{k.name}=...]" for k in self.keys]
        return " ".join([self.prog, *words, *keys, *(["[OVERRIDES ...]"] if self.overrides else [])])

    def help(self) -> str:
        lines = [f"usage: {self.usage()}", "", self.about.strip(), ""]
        width = max((len(k.name) for k in (*self.positional, *self.keys)), default=0) + 2
        for k in (*self.positional, *self.keys):
            extra = f" (one of {', '.join(k.choices)})" if k.choices else ""
            if not k.required and k.default not in (None, False, [], ""):
                extra += f" (default {k.default})"
            name = k.name.upper() if k in self.positional else f"{k.name}="
            lines.append(f"  {name:<{width}}{k.help}{extra}")
        if self.overrides:
            lines.append(f"  {'OVERRIDES':<{width}}{self.overrides}")
        if self.examples:
            lines += ["", "examples:", *(f"  {e}" for e in self.examples)]
        return "\n".join(lines) + "\n"

    def command_line(self, args: Args, leave_out: tuple[str, ...] = ()) -> str:
        """The command that gives `args`: `prog`, the words in order, each setting that differs from its default
        (those named in `leave_out` aside) and the overrides, each quoted for a shell where it needs it."""

        def text(value: Any) -> str:
            if isinstance(value, bool):
                return str(value).lower()
            return ",".join(map(str, value)) if isinstance(value, list) else str(value)

        words = [text(getattr(args, k.name)) for k in self.positional if getattr(args, k.name) is not None]
        given = [
            f"{k.name}={text(getattr(args, k.name))}"
            for k in self.keys
            if k.name not in leave_out and getattr(args, k.name) != k.default
        ]
        return " ".join([self.prog, *(shlex.quote(w) for w in [*words, *given, *getattr(args, "overrides", [])])])

    def parse(self, argv: list[str] | None = None) -> Args:
        """The settings of `argv` (default sys.argv[1:]). `--help` prints the help and exits 0; bad input
        prints one paragraph and the usage line and exits 2."""
        argv = sys.argv[1:] if argv is None else list(argv)
        if any(a in ("-h", "--help") for a in argv):
            print(self.help(), end="")
            raise SystemExit(0)
        try:
            return self._parse(argv)
        except ValueError as e:
            print(f"error: {e}\nusage: {self.usage()}  (--help says more)", file=sys.stderr)
            raise SystemExit(2) from None

    def _parse(self, argv: list[str]) -> Args:
        by_name = {k.name: k for k in self.keys}
        out = Args(**{k.name: k.default for k in (*self.positional, *self.keys)}, overrides=[])
        words = []
        args = iter(argv)
        for arg in args:
            if arg.startswith("--"):
                self._refuse_flag(arg, next(args, None) if "=" not in arg else None)
            name, eq, value = arg.partition("=")
            key = by_name.get(name.lower().replace("-", "_")) if eq else None
            if key is not None:
                try:
                    setattr(out, key.name, key.convert(value))
                except ValueError as e:
                    raise ValueError(f"{key.name}={value!r} is not valid: {e}") from None
            elif eq and self.overrides:
                out.overrides.append(arg)
            elif eq:
                close = difflib.get_close_matches(name.lower(), by_name, n=1)
                hint = f"did you mean {close[0]}=?" if close else f"this command takes {self._names()}"
                raise ValueError(f"{name}= is not a setting of {self.prog}: {hint}")
            else:
                words.append(arg)
        if self.positional and self.positional[-1].kind is list and len(words) >= len(self.positional):
            first = len(self.positional) - 1  # a last positional list takes every remaining word
            words = [*words[:first], ",".join(words[first:])]
        if len(words) > len(self.positional):
            raise ValueError(f"unexpected {' '.join(words[len(self.positional) :])!r}: settings are key=value")
        for key, word in zip(self.positional, words):
            try:
                setattr(out, key.name, key.convert(word))
            except ValueError as e:
                raise ValueError(f"{key.name.upper()} {word!r} is not valid: {e}") from None
        missing = [k.name.upper() for k in self.positional[len(words) :] if k.required]
        missing += [f"{k.name}=" for k in self.keys if k.required and getattr(out, k.name) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} is required")
        return out

    def _refuse_flag(self, arg: str, following: str | None) -> None:
        name, _, value = arg[2:].partition("=")
        key = next((k for k in self.keys if k.name == name.replace("-", "_")), None)
        if key is None:
            raise ValueError(f"{arg} is not an option of {self.prog}: it takes {self._names()}")
        value = value or ("true" if key.kind is bool else following or "...")
        raise ValueError(f"{arg} is spelled {key.name}={value} here (every cactus_bench command takes key=value)")

    def _names(self) -> str:
        return ", ".join(f"{k.name}=" for k in self.keys) or "no settings"

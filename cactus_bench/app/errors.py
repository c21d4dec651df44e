"""Failures as one paragraph a person can act on (what failed, which key, what to do), exit status 2.

`--debug` or CACTUS_BENCH_DEBUG=1 prints the traceback as well."""

from __future__ import annotations

import os
import sys
import textwrap
import traceback

# Failures whose message already says what to do: printed as they are.
EXPLAINED = (
    "ConfigError",
    "ConfigCompositionError",
    "DataError",
    "StoreError",
    "LockHeld",
    "LockLost",
    "NonFiniteModel",
    "ContextTooLong",
    "PairUnavailable",
    "SourceUnavailable",
    "UnverifiedBytes",
    "SweepFailed",
    "JobsUnfinished",
    "ModelLoadError",
    "SpecError",
    "RunNotFound",
    "AmbiguousRuns",
    "PlanError",
    "SlurmUnavailable",
)


def paragraph(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if type(e).__name__ not in EXPLAINED:
        text = (
            f"{type(e).__name__}: {text} (unexpected: rerun with --debug for the traceback, and report it "
            "if the cause is not clear)"
        )
    return textwrap.fill(f"error: {text}", width=110, break_on_hyphens=False, break_long_words=False)


def fail(e: BaseException) -> None:
    if os.environ.get("CACTUS_BENCH_DEBUG", "") not in ("", "0"):
        traceback.print_exception(e)
    print(paragraph(e), file=sys.stderr)
    sys.exit(2)


class ConfigCompositionError(ValueError):
    """What Hydra refused while composing a config, as one paragraph naming the key and what is allowed."""


def explain_composition(e: BaseException, overrides: list[str]) -> ConfigCompositionError | None:
    """Hydra's own error for a bad override (an unknown key or group option, a value of the wrong type,
    unparsable syntax), rewritten as our one paragraph; None for anything else."""
    import difflib
    import re

    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ValidationError

    from cactus_bench.app.schema import GROUPS, RENAMED_SETTINGS, RunConfig, renamed_message

    text, cause = str(e), e.__cause__
    if isinstance(e, MissingConfigException):
        found = re.search(r"Could not find '([\w/]+)/([^']*)'", text)
        if found:
            group, option = found.groups()
            options = re.findall(r"^\t(\S+)$", text, flags=re.M)
            close = difflib.get_close_matches(option, options, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return ConfigCompositionError(f"{group}={option} is not valid{hint}: choose one of {', '.join(options)}")
    if isinstance(cause, ConfigAttributeError):
        key = re.search(r"Could not override '([^']+)'", text)
        key = key.group(1) if key else "?"
        if key in RENAMED_SETTINGS:
            return ConfigCompositionError(renamed_message(key))
        group, _, leaf = key.rpartition(".")
        node = RunConfig.__dataclass_fields__.get(group)
        if group and node is not None:  # a nested key: the group's own fields
            known = sorted(node.default_factory.__dataclass_fields__)
        else:
            known = sorted({f.name for f in RunConfig.__dataclass_fields__.values()} | set(GROUPS))
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = f" Did you mean {group + '.' if group else ''}{close[0]}?" if close else ""
        return ConfigCompositionError(
            f"{key} is not a setting of a run.{hint} `python -m cactus_bench --help` lists them (a key the "
            f"schema does not have can only be added with +{key}=..., which a run refuses as unknown)."
        )
    if isinstance(cause, ValidationError):
        key = re.search(r"full_key: (\S+)", str(cause))
        value = re.search(r"Value '([^']*)'", str(cause))
        kind = re.search(r"converted to (\w+)", str(cause))
        key, value = key.group(1) if key else "?", value.group(1) if value else "?"
        need = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}.get(
            kind.group(1) if kind else "", "a value of the schema's type"
        )
        return ConfigCompositionError(f"{key}={value!r} is not valid: {need} is needed")
    if isinstance(e, HydraException) or type(e).__name__ == "OverrideParseException":
        said = f"could not read the overrides {' '.join(overrides)}: {text.splitlines()[0]}"
        unquoted = [o for o in overrides if not o.isascii() and "=" in o and o.split("=", 1)[1][:1] not in "'\""]
        if unquoted:  # Hydra's grammar reads an unquoted value in ASCII only
            key, value = unquoted[0].split("=", 1)
            said += f". A value with characters beyond ASCII must be quoted: '{key}=\"{value}\"'"
        return ConfigCompositionError(said)
    return None

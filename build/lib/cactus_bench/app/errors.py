"""Failures as one paragraph a person can act on (what failed, which key, what to do), exit status 2.

`--debug` or CACTUS_BENCH_DEBUG=1 prints the traceback as well."""

from __future__ import annotations

import os
import sys
import textwrap
import traceback

# Failures whose message already says what to do: printed as they are.
EXPLAINED = ("ConfigError", "DataError", "StoreError", "LockHeld", "PairUnavailable", "ModelLoadError")


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

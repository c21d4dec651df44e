"""The conditions a time was taken under (host, device, threads, batch size, load), and the caveat a timed
metric carries when its times do not share them: flagged, or withheld where the value would mislead."""

from __future__ import annotations

import os
from typing import Protocol


class Timed(Protocol):
    """What a caveat reads of a metric (a leaf: this module imports nothing of the metrics around it)."""

    @property
    def label(self) -> str: ...
    @property
    def timed(self) -> bool: ...
    @property
    def sampled(self) -> object: ...
    @property
    def paired(self) -> bool: ...


BUSY = 1.0  # runnable processes per core (1-minute load average / cores) above which a machine is busy


def load_per_core() -> float:
    """The 1-minute load average per core (0 where the system does not report it)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 0.0


def condition_class(c: dict) -> tuple:
    """What two timings must share to be compared: host, device, threads, batch size, quiet or busy."""
    return (c.get("host"), c.get("device"), c.get("threads"), c.get("batch_size"), c.get("load", 0) > BUSY)


def describe(c: tuple) -> str:
    host, device, threads, batch, busy = c
    return f"{host}/{device}, {threads} thread(s), batch {batch}, {'busy' if busy else 'quiet'}"


def timing_caveat(metric: Timed, samples: list[dict], reference: list[dict] | None = None) -> tuple[bool, str] | None:
    """Why a timed metric's value must not be read as it stands: (withheld, reason), or None when it may.
    A paired speedup (or a ratio of two runs' paired speedups) mixing items timed under different conditions
    (a resume on a busier or another machine) is flagged; a task-time speedup of runs decoded in batches is
    withheld (a batched item's wall time is not its own), and one whose two runs were timed under different
    conditions is flagged."""
    if not metric.timed:
        return None
    if metric.sampled is not None or metric.paired:  # paired timings: those of every run it reads must agree
        both = [*samples, *(reference or [])] if metric.paired else samples
        timed = [s for s in both if s["stats"].get("paired_method_time") is not None]
        kinds = {condition_class(s.get("timing_conditions", {})) for s in timed}
        if len(kinds) > 1:
            return False, f"{metric.label}: its items were timed under {len(kinds)} conditions: " + "; ".join(
                sorted(map(describe, kinds))
            )
        return _busy(metric, kinds)
    if reference is None:
        return None
    sides = {
        name: {condition_class(s.get("conditions", {})) for s in runs}
        for name, runs in (("method", samples), ("baseline", reference))
    }
    if any(c[3] not in (1, None) for kinds in sides.values() for c in kinds):
        return (
            True,
            f"{metric.label}: withheld, the runs were decoded in batches (see the timed sample's paired speedup)",
        )
    if sides["method"] != sides["baseline"] or len(sides["method"]) > 1:
        return False, f"{metric.label}: the two runs were timed under different conditions: " + "; ".join(
            sorted(map(describe, sides["method"] | sides["baseline"]))
        )
    return _busy(metric, sides["method"])


def _busy(metric: Timed, kinds: set[tuple]) -> tuple[bool, str] | None:
    """A time taken on a busy machine measures the load as well as the code: flagged, not withheld."""
    busy = sorted(describe(k) for k in kinds if k[4])
    if not busy:
        return None
    return False, f"{metric.label}: timed on a busy machine (load above {BUSY:g} per core: {'; '.join(busy)})"

"""What a run shows while it decodes: a tqdm bar on a terminal, a line per tenth of the items elsewhere."""

from __future__ import annotations

import sys
from pathlib import Path


class LineProgress:
    """Progress where no terminal reads it (a log file, CI, a SLURM job): one line per tenth of the items
    instead of a bar's thousands of carriage-return updates."""

    def __init__(self, total: int, desc: str, stream=None):
        self.total, self.desc, self.done, self.postfix = total, desc, 0, {}
        self.every = max(1, -(-total // 10))
        self.stream = stream or sys.stderr

    def update(self) -> None:
        self.done += 1
        if self.done % self.every == 0 or self.done == self.total:
            extra = "".join(f" {k}={v}" for k, v in self.postfix.items())
            print(f"{self.desc}: {self.done}/{self.total}{extra}", file=self.stream, flush=True)

    def set_postfix(self, **values) -> None:
        self.postfix = values

    def close(self) -> None:
        pass


def progress(total: int, desc: str, enabled: bool, stream=None):
    """A tqdm bar on a terminal, `LineProgress` elsewhere, nothing when progress=false."""
    from tqdm.auto import tqdm

    stream = stream or sys.stderr
    if enabled and not stream.isatty():
        return LineProgress(total, desc, stream)
    # smoothing=0: time left from the average rate so far (a batched run finishes rows in bursts, and the
    # default moving average of the latest burst put the first estimate minutes off)
    return tqdm(total=total, desc=desc, disable=not enabled, file=stream, smoothing=0)


def shown(value: float | None, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)  # "–" as in the tables: no figure, not a zero


def quiet_third_party_bars() -> None:
    """Silence transformers' weight-loading bars: between a sweep's runs they are pages of carriage returns,
    and the run's own progress (progress=true) says how far it is."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def shown_path(path: Path | str) -> str:
    """A path as a line shows it: relative to the working directory when it lies under it (shorter)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)

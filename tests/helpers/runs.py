"""Running a run and killing it part-way, the way a Ctrl-C or a crash would."""

import pytest

from cactus_bench.app import run as run_mod
from cactus_bench.benchmarks.task import TaskBenchmark


def run_killed_after(cfg, n: int, monkeypatch) -> list[int]:
    """Run `cfg` and raise KeyboardInterrupt as its (n+1)-th sample finishes; the indices stored before."""
    real, stored = TaskBenchmark.decode, []

    def killed(self, decoder, items):
        for record in real(self, decoder, items):
            if len(stored) == n:
                raise KeyboardInterrupt
            stored.append(record["index"])
            yield record

    with monkeypatch.context() as patch:
        patch.setattr(TaskBenchmark, "decode", killed)
        with pytest.raises(KeyboardInterrupt):
            run_mod.run(cfg)
    return stored

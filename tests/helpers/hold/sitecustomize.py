"""Holds a run mid-shard for the cluster tier, whatever the machine's speed (on PYTHONPATH of the processes a
test starts; SLURM jobs inherit it). With CACTUS_TEST_HOLD_AFTER=N, a run that has stored N samples waits
before its next one until the file CACTUS_TEST_HOLD_RELEASE exists: a requeue, a cancel or a SIGTERM then
lands on a run that is certainly between samples, not one that may already have finished its shard (which a
fast machine did). Nothing happens without the variable."""

import importlib.abc
import importlib.util
import os
import sys
import time

TARGET = "cactus_bench.adapters.benchmarks.task"


def _signalled() -> bool:
    """Whether the run was sent a signal (it then decodes on, as it would have, to its next item boundary)."""
    run = sys.modules.get("cactus_bench.app.run")
    return bool(run and run.SIGNALLED)


def _hold(cls, after: int, release: str) -> None:
    real = cls.decode

    def decode(self, decoder, items):
        for n, record in enumerate(real(self, decoder, items), 1):
            yield record  # the run stores it before asking for the next
            while n >= after and not os.path.exists(release) and not _signalled():
                time.sleep(0.05)

    cls.decode = decode


class _OnImport(importlib.abc.MetaPathFinder):
    """Patches TaskBenchmark when its module is first imported (importing it here would load torch into
    every Python process on the path)."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _hold(
                module.TaskBenchmark, int(os.environ["CACTUS_TEST_HOLD_AFTER"]), os.environ["CACTUS_TEST_HOLD_RELEASE"]
            )

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("CACTUS_TEST_HOLD_AFTER") and os.environ.get("CACTUS_TEST_HOLD_RELEASE"):
    sys.meta_path.insert(0, _OnImport())

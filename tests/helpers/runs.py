"""Small runs of the tests' pair on arith: their settings, a run of one method, and a run killed part-way
(the way a Ctrl-C or a crash would)."""

from pathlib import Path

import pytest

from cactus_bench.adapters.benchmarks.task import TaskBenchmark
from cactus_bench.app import run as run_mod
from cactus_bench.tools.report import load_spec

from .configs import cfg_of

TINY = ("pair=tiny", "data=arith", "m=2", "max_gen_toks=8", "progress=false")  # a small run: seconds
ROOT = Path(__file__).resolve().parents[2]
SHARDED = (*TINY, "method=cactus", "delta=0.75", "limit=5")  # a run the sharding tests split


def demo_spec(**over):
    """The demo's table spec at the small run's settings."""
    return load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 2, "max_gen_toks": 8, "limit": 6, **over})


def run_cell(method, *extra, results, pair_dir, limit=6):
    """A small run of `method` (on the small pair built for the tests) into `results`; its summary."""
    return run_mod.run(cfg_of(*TINY, f"method={method}", f"limit={limit}", *extra, results=results, pair_dir=pair_dir))


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

"""What a decode round costs the host: dispatched ops and host reads per round, measured on any device.

On a GPU at batch size 1 a decode step is launch-bound for small models: every dispatched op is a kernel
launch of several microseconds, and every host read of a device value (`.tolist()`, `.item()`, `if t:`)
stops the CPU from queueing the next step while the GPU works. So these two counts, taken on a CPU,
predict the GPU's overhead: the fast engine must dispatch a few ops per compiled graph launch (not per
layer), and read the device once per round (the verdict).

* ops per round: top-level aten calls made from Python (a composite op's inner calls are not counted
  again) plus compiled-graph launches, over a decode, divided by its rounds (torch.profiler); prefills
  (once per item) are left out;
* host reads per round: calls of the tensor methods that read a value back (tolist, item, numpy, cpu,
  bool/int/float/index conversion) during the decode, divided by its rounds.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from ..decode.cache import PREFILL

READS = ("tolist", "item", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")
GRAPH = "Torch-Compiled Region"


@contextlib.contextmanager
def count_host_reads(counts: Counter):
    """Count calls of the tensor methods that read a device value back to the host."""
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def counting(name, fn):
        def wrapper(self, *a, **k):
            counts[name] += 1
            return fn(self, *a, **k)

        return wrapper

    for name, fn in originals.items():
        setattr(torch.Tensor, name, counting(name, fn))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


def top_level_ops(prof) -> tuple[Counter, int]:
    """Aten ops called from Python (not inside another aten op or a compiled graph), and graph launches."""
    ops, graphs = Counter(), 0
    for e in prof.events():
        if not (e.name.startswith(GRAPH) or e.name.startswith("aten::")):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith(("aten::", GRAPH, PREFILL)):
            parent = parent.cpu_parent
        if parent is not None:
            continue
        if e.name.startswith(GRAPH):
            graphs += 1
        else:
            ops[e.name] += 1
    return ops, graphs


def per_round(decode: Callable[[], int]) -> dict:
    """Run `decode` (which returns how many rounds it made) under the profiler and the read counter."""
    reads = Counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof, count_host_reads(reads):
        rounds = decode()
    ops, graphs = top_level_ops(prof)
    return {
        "rounds": rounds,
        "ops_per_round": (sum(ops.values()) + graphs) / rounds,
        "graphs_per_round": graphs / rounds,
        "host_syncs_per_round": sum(reads.values()) / rounds,
        "reads": dict(reads),
        "top_ops": dict(ops.most_common(12)),
    }

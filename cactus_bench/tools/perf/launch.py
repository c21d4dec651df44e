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
import time
from collections import Counter
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from cactus_bench.core.decode.cache import PREFILL

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
    """Aten ops called from Python (`top_level_events`) by name, and compiled-graph launches."""
    events = top_level_events(prof)
    graphs = sum(e.name.startswith(GRAPH) for e in events)
    return Counter(e.name for e in events if not e.name.startswith(GRAPH)), graphs


# The part of a round that dispatched a top-level op: the first of this package's frames on its Python stack,
# from the outermost in, that is not the loop itself (engine.py, programs.py) or a model runner's dispatch
# (cache.py's forward, run, decode_step, _compiled; graphs.py's compiled call); an op with transformers' model
# code on its stack is the models' forward (the code transformers' own generate runs too). What the round calls
# is then counted whole: the output-KL measurement's calls into the rule are the output KL's, the rule's
# decision the rule's.
PARTS = (
    ("core/decode/warp.py", "warp"),
    ("core/rules/base.py:sample_", "sampling"),
    ("core/rules/", "rule"),
    ("core/decode/output_kl.py", "output KL"),
    ("core/decode/stats.py", "statistics"),
    ("core/decode/cache.py", "cache and masks"),
    ("core/decode/engine.py", "bookkeeping"),
    ("core/decode/programs.py", "bookkeeping"),
)
FORWARD = "model forwards"
DISPATCH = tuple(
    f"core/decode/{f}"
    for f in ("engine.py:", "programs.py:", "cache.py:forward", "cache.py:run", "cache.py:decode_step",
              "cache.py:_compiled", "graphs.py:compiled_call", "graphs.py:__call__")
)  # fmt: skip


def part_of(stack: list[str]) -> str:
    """The part of a round an op belongs to, from its Python stack (innermost frame first)."""
    if any(frame.startswith("transformers/") or "/transformers/" in frame for frame in stack):
        return FORWARD
    ours = []  # the decode's own frames (not a caller's: a benchmark's, a test's)
    for frame in stack:
        if "cactus_bench/core/decode/" in frame or "cactus_bench/core/rules/" in frame:
            path = frame.split("cactus_bench/", 1)[1]
            ours.append(path.split("(")[0] + ":" + frame.rsplit(": ", 1)[-1])
    if not ours:
        return "other"
    outermost_first = ours[::-1]
    where = next((f for f in outermost_first if not f.startswith(DISPATCH)), ours[0])
    return next((name for prefix, name in PARTS if where.startswith(prefix)), "other")


def top_level_events(prof) -> list:
    """Aten ops called from Python (not inside another aten op or a compiled graph), and graph launches."""
    out = []
    for e in prof.events():
        if not (e.name.startswith(GRAPH) or e.name.startswith("aten::")):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith(("aten::", GRAPH, PREFILL)):
            parent = parent.cpu_parent
        if parent is None:
            out.append(e)
    return out


def per_round(decode: Callable[[], int], split: bool = False) -> dict:
    """Run `decode` (which returns how many rounds it made) under the profiler and the read counter; with
    `split`, each round's ops also by the part of the round that dispatched them (`PARTS`: the model
    forwards, and the loop's own: warp, sampling, rule, statistics, cache and masks, bookkeeping)."""
    reads = Counter()
    stacks = {"with_stack": True, "experimental_config": torch._C._profiler._ExperimentalConfig(verbose=True)}
    with profile(activities=[ProfilerActivity.CPU], **(stacks if split else {})) as prof, count_host_reads(reads):
        rounds = decode()
    ops, graphs = top_level_ops(prof)
    out = {
        "rounds": rounds,
        "ops_per_round": (sum(ops.values()) + graphs) / rounds,
        "graphs_per_round": graphs / rounds,
        "host_syncs_per_round": sum(reads.values()) / rounds,
        "reads": dict(reads),
        "top_ops": dict(ops.most_common(12)),
    }
    if split:
        parts = Counter(FORWARD if e.name.startswith(GRAPH) else part_of(list(e.stack)) for e in top_level_events(prof))
        out["parts_per_round"] = {k: v / rounds for k, v in parts.most_common()}
        out["loop_ops_per_round"] = sum(v for k, v in parts.items() if k != FORWARD) / rounds
    return out


# Where a round's time goes, by the profiler's events (self time, first match wins): the kernels every loop runs
# (GEMMs, attention), the code torch.compile generated, what dynamo runs around each compiled call (its region,
# cache lookup and guards, AOT dispatch), and the other ops (the models' other eager ops and the loop's own);
# Python between ops is the wall time no event holds.
TIME_PARTS = {
    "GEMMs": lambda k: k in ("aten::mm", "aten::addmm"),
    "attention": lambda k: "scaled_dot_product" in k,
    "compiled code": lambda k: k.startswith("## Call CompiledFxGraph"),
    "dynamo": lambda k: "Compiled Region" in k or "Cache Lookup" in k or "Pregraph" in k or "AOTDispatcher" in k,
    "other ops": lambda k: True,
}
PYTHON = "Python outside ops"


def time_part(key: str) -> str:
    return next(part for part, match in TIME_PARTS.items() if match(key))


def round_times(decode: Callable[[], int]) -> dict:
    """Milliseconds per round of `decode` (which returns its rounds), profiled without stacks: the round, the
    compiled calls it made, and its time in each of TIME_PARTS and in Python outside any op."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        rounds = decode()
        wall = time.perf_counter() - start
    split = dict.fromkeys(TIME_PARTS, 0.0)
    for event in prof.key_averages():
        split[time_part(event.key)] += event.self_cpu_time_total * 1e-6
    split[PYTHON] = wall - sum(split.values())
    _, graphs = top_level_ops(prof)
    return {"compiled_calls": graphs / rounds} | {k: 1e3 * v / rounds for k, v in {"round": wall, **split}.items()}


def decode_round_ops(pair, compile: str | None, m: int, new_tokens: int, rule: str = "cactus") -> dict:
    """`per_round` (split) of one item decoded by the engine at batch size 1, and its `round_times`: the
    drafter/verifier `pair`, a 32-token prompt, `new_tokens` tokens, after a warm-up decode (which compiles,
    with `compile`). A rule that searches differently by device (mentored's β) searches as on a GPU: these
    counts predict a GPU's."""
    from cactus_bench.core.decode import Engine, EngineOptions, Job
    from cactus_bench.core.rules import build_rule
    from cactus_bench.core.rules.mentored import searching_as

    drafter, verifier = pair
    engine = Engine(verifier, drafter, build_rule(rule), m, eos={1}, options=EngineOptions(1, compile))
    prompt = list(range(10, 42))

    def decode() -> int:
        rounds = []
        engine.on_round = lambda e, slots: rounds.append(1)
        list(engine.run([Job(prompt, new_tokens, torch.Generator().manual_seed(1))]))
        engine.on_round = None
        return len(rounds)

    with searching_as("cuda"):
        list(engine.run([Job(prompt, new_tokens, torch.Generator().manual_seed(0))]))
        counts = per_round(decode, split=True)
        return {**counts, "time_ms_per_round": round_times(decode)}

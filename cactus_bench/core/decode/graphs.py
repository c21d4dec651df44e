"""What compiled decode forwards need beyond the model: CUDA graph trees' output contract, compile
accounting, and one compiled step per call signature that skips dynamo's guards.

CUDA graph trees (torch.compile's reduce-overhead mode, the fast engine on a GPU) replay graphs whose outputs
live in the graphs' memory pool: the next replay (in inference, every new call) reuses that memory, so a
tensor a call returned is overwritten, or refused ("accessing tensor output of CUDAGraphs that has been
overwritten"), at the next call. The runner copies out what it returns (`copy_out`). A CPU cannot replay CUDA
graphs, so tests emulate the overwrite: while `overwritten_outputs()` is on, every forward's raw outputs are
filled with NaN (integers: -1) at the next forward of any runner, compiled or not.

Each call that compiles a graph adds to `COMPILES` (graphs and seconds): runs record them, and the engine's
warm-up keeps them out of every timed item.
"""

from __future__ import annotations

import contextlib
import logging
import time
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger("cactus_bench")


def device_type(model) -> str:
    return model.get_input_embeddings().weight.device.type


def uses_cuda_graphs(model, backend: str | None) -> bool:
    return backend == "inductor" and device_type(model) == "cuda"


# Inductor on a CPU calls its kernels from a C++ wrapper instead of a Python one: a decode round's Python
# overhead is what limits a small model there, at the cost of a longer first compile (docs/benchmarks.md has
# the measurement). On CUDA the graph trees replay without any wrapper, so it stays off.
CPU_CPP_WRAPPER = True


def compile_options(model, backend: str | None) -> dict:
    """torch.compile's mode and options for a decode program (at most one of the two is given)."""
    if uses_cuda_graphs(model, backend):
        return {"mode": "reduce-overhead"}
    if backend == "inductor" and CPU_CPP_WRAPPER:
        return {"options": {"cpp_wrapper": True}}
    return {}


class RecompileLimitError(RuntimeError):
    """A model needed more compiled graphs than RECOMPILE_LIMIT: dynamo would otherwise run it eagerly."""


@dataclass
class CompileStats:
    """Graphs compiled by this process's decode forwards and the seconds the compiling calls took."""

    graphs: int = 0
    seconds: float = 0.0


COMPILES = CompileStats()


def graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


OVERWRITE: dict[str, Any] = {"on": False, "pending": []}


@contextlib.contextmanager
def overwritten_outputs() -> Iterator[None]:
    """Test mode: a forward's raw outputs are garbage after the next forward, as under CUDA graph trees."""
    OVERWRITE["on"], OVERWRITE["pending"] = True, []
    try:
        yield
    finally:
        OVERWRITE["on"], OVERWRITE["pending"] = False, []


def overwrite_previous() -> None:
    with torch.inference_mode():
        for t in OVERWRITE["pending"]:
            t.fill_(float("nan") if t.is_floating_point() else -1)
    OVERWRITE["pending"] = []


def copy_out(out: tuple) -> tuple:
    return tuple(t.clone() if t is not None else None for t in out)


# Dynamo checks a compiled function's guards before every call: ~2,700 of them for an 8-layer model (each
# parameter, module and attribute the forward reads), ~0.3 ms a call on a CPU core, as long as a
# launch-bound drafter's whole forward. The runner knows what varies between its calls
# (`ModelRunner.signature`), so each signature gets its own copy of the step holding one graph, and after its
# first call runs under `skip_guard_eval_unsafe` (only guards that once failed are checked: none). Every
# GUARD_CHECK_EVERY-th call of a signature runs with full guards: a graph compiled there means the signature
# missed something the guards check, a harness bug that stops the run (tests vary every setting with full
# guards on every call).
SKIP_GUARDS = True
GUARD_CHECK_EVERY = 64


def layout(t: Tensor | None) -> tuple | None:
    """What dynamo's tensor guards check of an argument (besides dispatch keys, fixed per run)."""
    return None if t is None else (tuple(t.shape), t.stride(), t.dtype, t.requires_grad)


class SignatureIncompleteError(RuntimeError):
    """A compiled step's guards failed for a signature that had compiled already (see SKIP_GUARDS)."""


class CompiledStep:
    """A decode step compiled for one model, backend and call signature (its own code object: dynamo keeps graphs
    and the recompile count per code object), and the number of calls it has run."""

    def __init__(self, step: Callable, model, backend: str, signature: tuple, index: int):
        name = f"{step.__name__}_{type(model).__name__}_{index}"
        code = step.__code__.replace(co_name=name)
        own = types.FunctionType(code, step.__globals__, name, step.__defaults__)
        self.fn = torch.compile(own, backend=backend, dynamic=False, **compile_options(model, backend))
        self.signature, self.calls = signature, 0

    def __call__(self, args: tuple) -> tuple[tuple, int]:
        """The step's outputs and the graphs dynamo compiled for this call (0 but on a first call)."""
        self.calls += 1
        if SKIP_GUARDS and self.calls > 1 and self.calls % GUARD_CHECK_EVERY:
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return self.fn(*args), 0
        before = graphs_compiled()
        out = self.fn(*args)
        new = graphs_compiled() - before
        if new and self.calls > 1:
            raise SignatureIncompleteError(
                f"a compiled decode step recompiled for the signature {self.signature}: something its guards "
                f"check changed between calls without changing the signature (`ModelRunner.signature`), so "
                f"calls that skipped the guards may have run a stale graph. This is a cactus-bench bug; "
                f"engine=eager (or cactus_bench.core.decode.graphs.SKIP_GUARDS = False) avoids it."
            )
        return out, new


def argument_key(a) -> object:
    """What a compiled program's signature holds of one argument (`ModelRunner.signature`)."""
    if isinstance(a, Tensor):
        return layout(a)
    if isinstance(a, (list, tuple)):
        return tuple(argument_key(x) for x in a)
    key = getattr(a, "trace_key", None)
    return key() if callable(key) else a


# One compiled graph per call signature (program, shapes, key bucket, rows, ...) of one model, at most this many
# per model: a run that needs more stops with one paragraph (each new graph is seconds of compiling in a timed
# item).
RECOMPILE_LIMIT = 64
COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {signature: CompiledStep}


def compiled_call(program: Callable, model, backend: str, signature: tuple, args: tuple, where: str) -> tuple:
    """`program(*args)` through the model's compiled step for `signature` (made at its first call); a call that
    compiled a graph adds to COMPILES and is logged with `where` (the runner's rows and key bucket)."""
    steps = COMPILED.setdefault(model, {})
    step = steps.get(signature)
    if step is None:
        if len(steps) >= RECOMPILE_LIMIT:
            raise RecompileLimitError(
                f"{type(model).__name__} needed more than {RECOMPILE_LIMIT} compiled graphs (one per program, "
                f"first draft width, key bucket and row count): every new one costs seconds of compiling inside "
                f"timed items. Fewer distinct shapes help: one batch_size per process, a smaller max_gen_toks, "
                f"or engine=eager."
            )
        step = steps[signature] = CompiledStep(program, model, backend, signature, len(steps))
    start = time.perf_counter()
    out, new = step(args)
    if new:
        took = time.perf_counter() - start
        COMPILES.graphs += new
        COMPILES.seconds += took
        log.info("compiled %d graph(s) of %s in %.1fs (%s)", new, type(model).__name__, took, where)
    return out

"""What compiled decode forwards need beyond the model: CUDA graph trees' output contract, and compile
accounting.

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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


def device_type(model) -> str:
    return model.get_input_embeddings().weight.device.type


def uses_cuda_graphs(model, backend: str | None) -> bool:
    return backend == "inductor" and device_type(model) == "cuda"


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

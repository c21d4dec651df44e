"""Portable CPU kernels: bit-identical floating-point results within each of two classes of x86-64 CPUs with
AVX2 or newer (`cpu_class`: Intel Sapphire Rapids, and every other one, AMD or Intel, with or without
AVX-512), for building the embedded pair.

torch picks its CPU kernels when a process starts, by the instruction set it finds (ATen's CPU capability:
default, avx2 or avx512), and MKL, which runs torch's float32 matrix products on x86, picks its own code
branch the same way. The branches block their sums differently, so the last bits of a result differ, and a
training run multiplies those bits into other weights: the pair built on an Intel Xeon with AVX-512 hashed
differently from the one built on an AMD EPYC with AVX2, and decoded another table.

A process started with `PORTABLE` runs ATen's AVX2 kernels (one binary code path on every AVX2 CPU), MKL's
COMPATIBLE branch (SSE2 without the approximate reciprocal instructions whose results differ between
vendors: MKL's conditional numerical reproducibility, which MKL honours on non-Intel CPUs only for this
branch; its AVX2 branch falls back to MKL's own dispatch there) and one thread (a sum split over threads is
ordered by the thread count). All three are read once, when torch and MKL start, so they must be in the
environment of a new process: `run_portably` starts one. MKL's COMPATIBLE branch costs about 2.3× in
training time here, which is why the pair's weights ship with the package (`shipped.py`) and only a
rebuild pays it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

PORTABLE = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


# The classes of CPUs within which the portable kernels train the same weights, by the CPU flag that marks
# each; a CPU with none of them is "common". Intel Sapphire Rapids (AVX512-FP16, AMX) trains other weights
# than the common class (measured 2026-12-04 on the version 3 recipe: first 25 drafter steps 340aeffe…
# against ce9ff29d…, under every ATen capability, MKL branch and oneDNN ISA limit tried). The cause is not
# found: every SGEMM there runs MKL's COMPATIBLE branch, oneDNN is never called and ATen runs its AVX2
# kernels. Decoding is unaffected (the same shipped bytes decode the same table on both); a rebuild gives
# the shipped bytes on a CPU of the class that built them (`quality.json`: kernels.cpu_class), and its own
# class's recorded bytes on the other (`class_builds.json`).
CPU_CLASSES = {"avx512_fp16": "sapphire-rapids"}
COMMON = "common"


def cpu_class() -> str:
    """The class of this CPU: the class of the first flag in `CPU_CLASSES` it has, else `COMMON`."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:  # not Linux: no known other class
        return COMMON
    flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    return next((name for flag, name in CPU_CLASSES.items() if flag in flags), COMMON)


def is_portable() -> bool:
    """This process started with the portable kernels (and torch runs ATen's AVX2 ones)."""
    import torch

    started = all(os.environ.get(k) == v for k, v in PORTABLE.items())
    return started and torch.backends.cpu.get_cpu_capability() == "AVX2" and torch.get_num_threads() == 1


def describe() -> dict:
    """The kernels this process runs (stored with what it builds)."""
    import torch

    return {
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": os.environ.get("MKL_CBWR"),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu_class": cpu_class(),
    }


def run_portably(args: Sequence[str], log: Callable[[str], None] = print, env: dict | None = None) -> None:
    """`python <args>` in a new process with the portable kernels, its output passed to `log` line by line;
    a failure raises with its last lines."""
    child = {**os.environ, **(env or {}), **PORTABLE}
    proc = subprocess.Popen(
        [sys.executable, *args], env=child, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    said: list[str] = []
    for line in proc.stdout:
        said.append(line.rstrip("\n"))
        log(said[-1])
    if proc.wait() != 0:
        tail = "\n".join(said[-20:])
        raise RuntimeError(
            f"the portable build (python {' '.join(args)}) failed with status {proc.returncode}:\n{tail}"
        )

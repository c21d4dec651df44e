"""The CPU kernel levels a test may ask torch and numpy for: only those this CPU has (forcing one it lacks
kills the process with SIGILL), each as the environment that selects it."""

from __future__ import annotations

ATEN_LEVELS = ("default", "avx2", "avx512")  # ATen's x86 dispatch levels, narrowest first
NUMPY_ABOVE_BASELINE = ("X86_V4", "AVX512_ICL", "AVX512_SPR")  # numpy 2's dispatch targets above AVX2


def aten_level() -> str:
    """The widest ATen level this CPU runs (what torch picks unforced), as ATEN_CPU_CAPABILITY spells it."""
    import torch

    return torch.backends.cpu.get_cpu_capability().lower()


def kernel_levels() -> tuple[dict[str, dict[str, str]], list[str]]:
    """{name: environment} for each ATen level up to this CPU's widest (numpy narrowed to its baseline at the
    scalar level), and the names of the levels this CPU lacks."""
    import numpy as np

    widest = aten_level()
    have = ATEN_LEVELS[: ATEN_LEVELS.index(widest) + 1] if widest in ATEN_LEVELS else ("default",)
    features = np._core._multiarray_umath.__cpu_features__
    wide_numpy = " ".join(f for f in NUMPY_ABOVE_BASELINE if features.get(f))
    levels = {level: {"ATEN_CPU_CAPABILITY": level} for level in have}
    if wide_numpy:  # numpy refuses to disable what the CPU does not have
        levels["default"]["NPY_DISABLE_CPU_FEATURES"] = wide_numpy
    return levels, [level for level in ATEN_LEVELS if level not in have]

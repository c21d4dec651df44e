"""Timing helpers and result files shared by the benchmark scripts and the device check."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from cactus_bench.core.utils import environment_info, write_text_atomic


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_time(fn: Callable[[], object], device: torch.device, repeat: int = 10, warmup: int = 3) -> float:
    """Median seconds of `fn` over `repeat` calls after `warmup` (the device synchronised around each)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def spread(values: list[float]) -> str:
    """A ratio's median and range over repeats, e.g. `6.4x (5.9-6.8)`."""
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def write_results(out: str | Path, markdown: str, data: dict, command: str) -> None:
    """`<out>.md` (the table, the command that reproduces it, the machine) and `<out>.json` (the numbers
    with the environment), atomically."""
    env = environment_info()
    hw = env["hardware"]
    cpu = f"{hw.get('cpu_model') or hw.get('processor') or hw.get('machine')} ({hw.get('cpu_capability')})"
    footer = (
        f"\n`{command}` — commit {env.get('git_commit')}, torch {torch.__version__}, {torch.get_num_threads()} "
        f"thread(s), {hw.get('gpu') or cpu}, load avg {hw.get('load_avg')}\n"
    )
    write_text_atomic(Path(f"{out}.md"), markdown.rstrip("\n") + "\n" + footer)
    write_text_atomic(Path(f"{out}.json"), json.dumps({**data, "command": command, "env": env}, indent=1, default=str))

"""Small plumbing shared by the core and the adapters: atomic writes and an environment record."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "lm_eval",
    "datasets",
    "hydra-core",
    "omegaconf",
    "wandb",
    "numpy",
    "pandas",
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def path_part_problem(name: object) -> str | None:
    """Why `name` cannot be one part of a path under a results folder (a separator, `..`, an absolute path,
    a leading dot, a control character), or None when it can: letters, digits and `_ . + = , @ -`."""
    text = str(name)
    if re.fullmatch(r"\w[\w.+=,@-]*", text) and ".." not in text:
        return None
    return "it becomes a folder or file name, so it may hold letters, digits and _ . + = , @ - (no '/', no '..')"


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write via a temp file in the same folder + rename, so readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: teammates on a shared cluster must read results
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# What a result is written to: a benchmark that rewrites it (or one before it in a chain) does not change the
# code it measured, so `-dirty` is about everything else.
RESULTS_DIR = "results"


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """HEAD's hash, with `-dirty` when a tracked file outside `results/` differs from it."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd or Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)", f":(top,exclude){RESULTS_DIR}"],
            cwd=cwd or Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The CPU's model name (Linux), e.g. "AMD EPYC 9R14 96-Core Processor"; None where not reported."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def environment_info() -> dict:
    """Package versions, git commit and hardware: stored with every result."""
    import torch  # here, not at the top: atomic files and the git commit serve tools that never load torch

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    hw: dict[str, Any] = {
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_model": cpu_model(),
        # the kernel level ATen dispatches to (AVX2, AVX512, ...): CPU speed and rounding differ by it
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        hw["gpu"] = torch.cuda.get_device_name(0)
        hw["gpu_count"] = torch.cuda.device_count()
    try:
        hw["load_avg"] = os.getloadavg()
    except OSError:
        pass
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": versions,
        "git_commit": git_commit(),
        "hardware": hw,
    }

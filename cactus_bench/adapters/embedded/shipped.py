"""The embedded pair as the package ships it (`tiny_pair/`, ~7.4 MB): the default recipe (`recipes.SPEC`),
trained once with portable kernels (`kernels.py`) by `python -m cactus_bench.adapters.embedded rebuild=true ship=true`.

A user's first `make demo` copies it into the cache instead of training for minutes, and every machine decodes
the same bytes. Its `quality.json` names the recipe (`spec_hash`), the kernels it was built with (with the
class of CPU that built it) and the hash of each model's weights after the build's first steps
(`fingerprints`).

The same recipe trains other bytes on a CPU of another class (`kernels.CPU_CLASSES`), so `class_builds.json`
records, per class of CPU that has built the shipped recipe, the sha256 of every file its build wrote and its
fingerprints: a machine of any recorded class checks in seconds that it would train its class's weights
(`tests/adapters/test_embedded.py`), and in full with `python -m cactus_bench.adapters.embedded rebuild=true`
(which compares every file with its class's record: on the shipped class, the shipped files).
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

from cactus_bench.core.utils import cpu_model, write_text_atomic

FOLDER = Path(__file__).parent / "tiny_pair"
CLASS_BUILDS = Path(__file__).parent / "class_builds.json"
WEIGHTS = ("verifier/model.safetensors", "drafter/model.safetensors")
UNCOMPARED = ("quality.json", "manifest.json")  # the build's own time and the cache's checksums


def quality() -> dict:
    return json.loads((FOLDER / "quality.json").read_text())


def built_on() -> str:
    """The class of CPU the shipped pair was built on (`kernels.cpu_class`): a rebuild reproduces its bytes
    on CPUs of that class."""
    return quality()["kernels"]["cpu_class"]


def holds(spec_hash: str) -> bool:
    """The package ships this recipe's pair."""
    return (FOLDER / "quality.json").is_file() and quality().get("spec_hash") == spec_hash


def weight_hashes(folder: Path) -> dict[str, str]:
    """sha256 of each model's weights file in a pair's folder (what README quotes)."""
    return file_hashes(folder, WEIGHTS)


def file_hashes(folder: Path, files) -> dict[str, str]:
    """sha256 of each of these files (paths relative to `folder`)."""
    return {rel: hashlib.sha256((folder / rel).read_bytes()).hexdigest() for rel in files}


def build_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file a build wrote into `folder` (quality.json and the cache's manifest aside)."""
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name not in UNCOMPARED)
    return file_hashes(folder, files)


def differences(folder: Path, expected: dict[str, str] | None = None) -> list[str]:
    """The files of a built pair whose bytes differ from `expected` ({path: sha256}; default: the shipped
    pair's files); [] when the build reproduced them exactly."""
    expected = build_hashes(FOLDER) if expected is None else expected
    built = build_hashes(folder)
    return sorted(rel for rel in expected.keys() | built.keys() if expected.get(rel) != built.get(rel))


def class_builds() -> dict[str, dict]:
    """The shipped recipe's recorded builds by class of CPU (`kernels.cpu_class`): {class: {"files": {path:
    sha256}, "fingerprints": {role: sha256}, "cpu": ..., "torch": ...}}; a record of another recipe (a shipped
    pair that changed since) counts for nothing."""
    if not CLASS_BUILDS.is_file():
        return {}
    recorded = json.loads(CLASS_BUILDS.read_text())
    return recorded["classes"] if recorded.get("spec_hash") == quality().get("spec_hash") else {}


def recorded_files() -> list[dict[str, str]]:
    """The files ({path: sha256}) of every recorded build of the shipped recipe: what a cache of it may hold."""
    return [record["files"] for record in class_builds().values()]


def record_build(folder: Path, cpu_class: str) -> dict:
    """Record the build in `folder` (of the shipped recipe, trained on this CPU) as its class's."""
    built = json.loads((folder / "quality.json").read_text())
    if built["spec_hash"] != quality()["spec_hash"]:
        raise ValueError(f"the build in {folder} is of recipe {built['spec_hash']}, not the shipped one")
    record = {
        "files": build_hashes(folder),
        "fingerprints": {role: f["sha256"] for role, f in built["fingerprints"].items()},
        "cpu": cpu_model() or platform.machine(),
        "torch": built["kernels"]["torch"],
    }
    classes = {**class_builds(), cpu_class: record}
    write_text_atomic(
        CLASS_BUILDS, json.dumps({"spec_hash": built["spec_hash"], "classes": dict(sorted(classes.items()))}, indent=1)
    )
    return record

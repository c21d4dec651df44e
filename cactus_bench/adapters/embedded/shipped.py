"""The embedded pair as the package ships it (`tiny_pair/`, ~7.4 MB): the default recipe (`recipes.SPEC`),
trained once with portable kernels (`kernels.py`) by `python -m cactus_bench.adapters.embedded rebuild=true ship=true`.

A user's first `make demo` copies it into the cache instead of training for minutes, and every machine decodes
the same bytes. Its `quality.json` names the recipe (`spec_hash`), the kernels it was built with (with the
class of CPU that built it) and the hash of each model's weights after the build's first steps
(`fingerprints`), so a machine of that class can check in seconds that it would train the same weights
(`tests/adapters/test_embedded.py`), and in full with `python -m cactus_bench.adapters.embedded rebuild=true`
(which compares every file with the shipped one).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FOLDER = Path(__file__).parent / "tiny_pair"
WEIGHTS = ("verifier/model.safetensors", "drafter/model.safetensors")


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


def differences(folder: Path) -> list[str]:
    """The files of a built pair whose bytes differ from the shipped pair's (quality.json aside: it holds
    the build's own time); [] when the build reproduced the shipped pair exactly."""
    shipped = {p.relative_to(FOLDER) for p in FOLDER.rglob("*") if p.is_file() and p.name != "quality.json"}
    built = {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()}
    built = {p for p in built if p.name not in ("quality.json", "manifest.json")}
    return sorted(
        str(rel)
        for rel in shipped | built
        if rel not in shipped or rel not in built or (FOLDER / rel).read_bytes() != (folder / rel).read_bytes()
    )

"""The embedded `tiny` pair in the cache: `ensure_pair()` returns a folder with `drafter/` and `verifier/`
(each a `save_pretrained` model plus the tokenizer), loadable by `load_pair` like any hub model, and
`quality.json` with the measured quality. The default recipe's pair ships with the package (`shipped.py`)
and is copied into the cache; another recipe (or `rebuild`) is trained in a process of its own with portable
kernels (`kernels.py`, `build.py`). A lock file serialises builders; the build writes into a temporary
folder renamed into place, and a manifest of sha256 sums detects a partial or corrupt cache. Nothing here
imports torch: `make embedded` and a cached pair's check take a fraction of a second.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

from cactus_bench.adapters.embedded import shipped
from cactus_bench.adapters.embedded.kernels import run_portably
from cactus_bench.adapters.embedded.recipes import SPEC, default_cache_dir, spec_hash, tiny_folder_name
from cactus_bench.core.utils import write_text_atomic

MANIFEST = "manifest.json"


def pair_dir(cache_dir: Path | None = None, spec: dict = SPEC) -> Path:
    return Path(cache_dir or default_cache_dir()) / tiny_folder_name(spec)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class UnverifiedBytes(OSError):
    """Bytes that should be a recorded build are not: the message says which and what to do."""


def cache_problem(folder: Path, verified: Sequence[dict[str, str]] = ()) -> str | None:
    """None if `folder` is a complete, intact build; otherwise what is wrong with it. Intact is every file of
    its manifest matching its checksum and, given `verified` records ({path: sha256} of builds known good:
    the package's, README's), every file of one of them: a manifest re-hashed from other bytes is no proof."""
    if not folder.exists():
        return "missing"
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
        if not isinstance(files, dict) or not files:
            raise ValueError("no files")
    except (OSError, ValueError, KeyError, TypeError):
        return "incomplete (no readable manifest)"
    for rel, digest in files.items():
        path = folder / rel
        if not path.is_file():
            return f"incomplete ({rel} is missing)"
        if file_sha256(path) != digest:
            return f"corrupt ({rel} does not match its checksum)"
    if verified and not is_recorded(files, verified):
        return "not a recorded build (its files' sha256 match none of the package's records)"
    return None


def is_recorded(files: dict[str, str], verified: Sequence[dict[str, str]]) -> bool:
    """Whether these files ({path: sha256}) hold every file of one of the `verified` records."""
    return any(all(files.get(rel) == digest for rel, digest in record.items()) for record in verified)


@contextmanager
def locked(lock_path: Path, log: Callable[[str], None] = print):
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process that is building this cache ({lock_path})")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_pair(
    cache_dir: Path | str | None = None, spec: dict = SPEC, log: Callable[[str], None] = print, rebuild: bool = False
) -> Path:
    """The cached pair's folder, made first if it is missing, partial or corrupt (or `rebuild`). The shipped
    recipe's cache must be one of its recorded builds (`shipped.class_builds`), whatever its manifest says;
    a rebuild is checked against its class's record by its own command instead."""
    folder = pair_dir(Path(cache_dir) if cache_dir else None, spec)
    verified = [] if rebuild or not shipped.holds(spec_hash(spec)) else shipped.recorded_files()
    return cached_build(folder, lambda out: make_pair(out, spec, log, rebuild), log, rebuild, verified)


def make_pair(out: Path, spec: dict, log: Callable[[str], None], rebuild: bool = False) -> None:
    """The shipped pair when it is this recipe's (unless a rebuild is asked for), else a portable build."""
    if not rebuild and shipped.holds(spec_hash(spec)):
        log(f"embedded pair: the package's pair ({shipped.FOLDER})")
        shutil.copytree(shipped.FOLDER, out)
        return
    build_portably(out, spec, log)


def build_portably(out: Path, spec: dict, log: Callable[[str], None] = print) -> None:
    """`build` in a new process started with the portable kernels (the same bytes on any AVX2 CPU)."""
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "spec.json"
        recipe.write_text(json.dumps(spec))
        run_portably(["-m", "cactus_bench.adapters.embedded.train_pair", "build", str(out), str(recipe)], log)


def cached_build(
    folder: Path,
    make: Callable[[Path], object],
    log: Callable[[str], None],
    rebuild: bool = False,
    verified: Sequence[dict[str, str]] = (),
) -> Path:
    """`folder`, made by `make(tmp)` first if it is missing, partial, corrupt or (given `verified` records)
    not one of them: one builder at a time (a lock file), built in a temporary folder renamed into place,
    with a manifest of sha256 sums. A new build that matches none of `verified` is refused, never cached."""
    with locked(folder.with_name(folder.name + ".lock"), log):
        problem = "rebuild requested" if rebuild else cache_problem(folder, verified)
        if problem is None:
            return folder
        if problem != "missing":
            log(f"cache {folder} is {problem}: rebuilding")
        shutil.rmtree(folder, ignore_errors=True)
        tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        make(tmp)
        files = {
            str(p.relative_to(tmp)): file_sha256(p)
            for p in sorted(tmp.rglob("*"))
            if p.is_file() and p.name != MANIFEST
        }
        if verified and not is_recorded(files, verified):
            shutil.rmtree(tmp, ignore_errors=True)
            closest = min(verified, key=lambda record: sum(files.get(k) != d for k, d in record.items()))
            differ = sorted(rel for rel, d in closest.items() if files.get(rel) != d)
            raise UnverifiedBytes(
                f"the build of {folder.name} does not give its recorded bytes ({', '.join(differ)} differ from the "
                "sha256 README and the package record), so it is not used. Its source is damaged, or this "
                "environment converts differently: reinstall the package (pip install --force-reinstall "
                "cactus-bench) with the versions of constraints.txt, and run again."
            )
        write_text_atomic(tmp / MANIFEST, json.dumps({"files": files}, indent=1))
        os.replace(tmp, folder)
    return folder


def format_quality(q: dict, built_now: bool = True) -> str:
    """The quality figures; `built_now`: this call built the pair (else it was reused from the cache)."""
    slips = "; ".join(
        f"{role} writes a slipped {event} digit {p['mean']:.0%} (10-90 %: {p['p10']:.0%}-{p['p90']:.0%})"
        for role, events in q.get("slip_probability", {}).items()
        for event, p in events.items()
    )
    return (
        f"verifier accuracy {q['verifier_accuracy']:.1%}, drafter accuracy {q['drafter_accuracy']:.1%}, {slips}, "
        f"SpS acceptance {q['sps_acceptance']:.2f} (T={q['temperature']}, m={q['m']}), "
        + (
            f"built in {q.get('build_seconds', float('nan')):.0f}s"
            if built_now
            else f"reused from the cache (it took {q.get('build_seconds', float('nan')):.0f}s to build)"
        )
    )

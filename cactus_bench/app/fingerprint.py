"""What a model's name does not say of its weights, for a run's identity (`identity.py`): a local folder or
file is identified by its content (a rerun after new weights were written to the same folder is another
run), an embedded pair by its recipe; a hub id says it itself (with its revision).

A local model's content is the sha256 of its weight files and config. Each file is read once: its digest is
remembered in the cache (`file-digests.json`) under its path, size, modification time and inode, so a table
looking up runs stats the files instead of reading gigabytes again, and a file rewritten in place (new
mtime or size) is read anew."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from cactus_bench.adapters.embedded import PREFIX, default_cache_dir, folder_name
from cactus_bench.core.utils import write_text_atomic

WEIGHT_FILES = ("*.safetensors", "*.bin", "*.gguf", "*.pt", "*.pth", "config.json")


def weights_of(name: str | None) -> str | None:
    """A fingerprint of the weights `name` stands for: the embedded pair's recipe folder, or a local path's
    content (`content_hash`); None for a hub id (or no model)."""
    if not name:
        return None
    if name.startswith(PREFIX):
        return folder_name(name)
    path = Path(name).expanduser()
    return content_hash(path) if path.exists() else None


def content_hash(path: Path) -> str:
    """sha256 (16 hex digits) over a model's files: a .gguf file itself, or a folder's weight files and
    config.json, each as its relative name, size and content digest."""
    files = [path] if path.is_file() else sorted({f for p in WEIGHT_FILES for f in path.rglob(p) if f.is_file()})
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(json.dumps([str(f.relative_to(path)) if f != path else f.name, st.st_size]).encode())
        h.update(file_digest(str(f.resolve()), st.st_size, st.st_mtime_ns, st.st_ino).encode())
    return h.hexdigest()[:16]


@lru_cache(maxsize=256)
def file_digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """A file's sha256, read once per (path, size, mtime, inode): remembered in this process and in the
    cache's `file-digests.json` across processes."""
    store = default_cache_dir() / "file-digests.json"
    key = f"{path}|{size}|{mtime_ns}|{inode}"
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    known[key] = h.hexdigest()
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(store, json.dumps(known))
    except OSError:  # a read-only cache only costs reading the file again next time
        pass
    return known[key]

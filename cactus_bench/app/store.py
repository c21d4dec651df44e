"""The results store: one folder per run under results/runs, so a crashed or interrupted run loses nothing.

    <results_dir>/<data>/<pair>/<method-tag>_m<m>_s<seed>_<key>/
        config.yaml     the resolved config                       (atomic write)
        manifest.json   versions, git commit, hardware, start/end (atomic write)
        samples.jsonl   one line per finished sample, appended and fsynced as it finishes
        summary.json    run metrics                               (atomic write)

Re-running the same config opens the same folder: finished samples are skipped, and a half-written last
line (a crash mid-write) is discarded.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..utils import environment_info, write_text_atomic
from .config import identity, method_of, run_key


def run_dir(cfg: DictConfig) -> Path:
    name = f"{method_of(cfg).run_name}_s{cfg.seed}_{run_key(cfg)}"
    return Path(cfg.results_dir) / cfg.data.label / cfg.pair.name / name


class RunStore:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.samples_path = self.folder / "samples.jsonl"

    @classmethod
    def open(cls, cfg: DictConfig) -> RunStore:
        store = cls(run_dir(cfg))
        store.folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(store.folder / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        manifest = store.manifest()
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        manifest.update(identity=identity(cfg), status="running", last_start=now, environment=environment_info())
        manifest.setdefault("started", now)
        manifest.setdefault("history", []).append({"start": now})
        store.write_manifest(manifest)
        return store

    def manifest(self) -> dict:
        path = self.folder / "manifest.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def write_manifest(self, manifest: dict) -> None:
        write_text_atomic(self.folder / "manifest.json", json.dumps(manifest, indent=1, default=str))

    def finish(self, status: str = "complete") -> None:
        manifest = self.manifest()
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        manifest.update(status=status, ended=now)
        manifest["history"][-1]["end"] = now
        manifest["history"][-1]["status"] = status
        self.write_manifest(manifest)

    def samples(self) -> list[dict]:
        """Finished samples; a trailing partial line (interrupted write) is dropped from the file."""
        if not self.samples_path.exists():
            return []
        raw = self.samples_path.read_bytes()
        complete, _, partial = raw.rpartition(b"\n")
        if partial:
            write_text_atomic(self.samples_path, (complete + b"\n").decode() if complete else "")
        return [json.loads(line) for line in complete.decode().splitlines() if line.strip()]

    def append(self, record: dict) -> None:
        line = json.dumps(record, default=str) + "\n"
        with open(self.samples_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def write_summary(self, summary: dict) -> None:
        write_text_atomic(self.folder / "summary.json", json.dumps(summary, indent=1, default=str))

    def write_artifact(self, name: str, text: str) -> None:
        write_text_atomic(self.folder / name, text)

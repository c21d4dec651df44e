"""The results store: one folder per run under results/runs, so a crashed or interrupted run loses nothing.

    <paths.runs>/<data>/<pair>/<method-tag>_m<m>_s<seed>_<key>/   (`RunIdentity.folder`)
        config.yaml     the resolved config                                  (atomic write)
        manifest.json   versions, git commit, hardware, start/end, history  (atomic write)
        samples.jsonl   one line per finished sample, appended and fsynced as it finishes
        timing.jsonl    paired timings (an item's decode beside the verifier alone's), appended; a later
                        line for an item supersedes an earlier one (a re-timed item)
        summary.json    run metrics, written once every item is present     (atomic write)
        .lock           the one writer's host and pid, while it writes

A sharded run (`shard=i/n`) keeps the folder and gives each shard its own files (`samples.shard-i-of-n.jsonl`,
`manifest.shard-i-of-n.json`, `.lock.shard-i-of-n`), so shards never contend for a file. Readers see the
union of every samples file, each item once.

Re-running the same config opens the same folder: finished samples are skipped, and a half-written last
line (a crash mid-write) is discarded. A corrupt line elsewhere is an error naming the file and line.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..utils import environment_info, write_text_atomic
from .config import parse_shard
from .identity import RunIdentity
from .lock import RunLock

log = logging.getLogger("cactus_bench")
SAMPLES = re.compile(r"samples(\.shard-(\d+)-of-(\d+))?\.jsonl$")
TIMING = re.compile(r"timing(\.shard-(\d+)-of-(\d+))?\.jsonl$")


class StoreError(ValueError):
    """A results folder that cannot be read or written as it is: the message says how to recover."""


def run_dir(cfg: DictConfig) -> Path:
    return RunIdentity.of(cfg).folder(cfg.paths.runs)


def shard_suffix(shard: tuple[int, int] | None) -> str:
    return f".shard-{shard[0]}-of-{shard[1]}" if shard else ""


def samples_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("samples*.jsonl") if SAMPLES.fullmatch(p.name))


def timing_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("timing*.jsonl") if TIMING.fullmatch(p.name))


def read_timings(folder: Path) -> dict:
    """Each timed item's latest paired timing, across shard files."""
    out = {}
    for path in timing_files(folder):
        for t in read_samples_file(path):
            out[t["index"]] = t
    return out


def read_samples_file(path: Path, repair: bool = False) -> list[dict]:
    """The finished samples in one file. A partial last line (a crash mid-write) is skipped, and with
    `repair` cut from the file (only its writer may do that); a bad line elsewhere is a StoreError."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    complete, _, partial = raw.rpartition(b"\n")
    if partial and repair:
        write_text_atomic(path, (complete + b"\n").decode() if complete else "")
    out = []
    for n, line in enumerate(complete.decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as e:
            raise StoreError(
                f"{path}, line {n}, is not a valid sample ({e.msg}). The other samples are intact: delete that "
                f"line (`sed -i '{n}d' {path}`) and run the same command again; the run resumes and decodes "
                "that item anew."
            ) from None
    return out


def read_samples(folder: Path) -> list[dict]:
    """Every finished sample of a run, across shard files, each item once (the first copy kept; a second
    copy, from two writers at once, is logged and ignored), with its paired timing where it has one."""
    timings = read_timings(folder)
    seen, out = {}, []
    for path in samples_files(folder):
        for s in read_samples_file(path):
            if s["index"] in seen:
                log.warning(
                    "%s: item %s is stored twice (also in %s); the first copy counts",
                    path.name,
                    s["index"],
                    seen[s["index"]],
                )
                continue
            seen[s["index"]] = path.name
            t = timings.get(s["index"])
            if t is not None:
                s["stats"] = {**s["stats"], **t["stats"]}
                s["timing_conditions"] = t["conditions"]
            out.append(s)
    return out


def duplicated_items(folder: Path) -> dict:
    """Items stored in more than one line, with the files that hold them."""
    where: dict = {}
    for path in samples_files(folder):
        for s in read_samples_file(path):
            where.setdefault(s["index"], []).append(path.name)
    return {k: v for k, v in where.items() if len(v) > 1}


def _append_line(path: Path, record: dict) -> None:
    line = json.dumps(record, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


class RunStore:
    def __init__(self, folder: Path, shard: tuple[int, int] | None = None):
        self.folder = Path(folder)
        self.shard = shard
        suffix = shard_suffix(shard)
        self.samples_path = self.folder / f"samples{suffix}.jsonl"
        self.timing_path = self.folder / f"timing{suffix}.jsonl"
        self.manifest_path = self.folder / f"manifest{suffix}.json"
        self.lock = RunLock(self.folder / f".lock{suffix}")

    @classmethod
    def open(cls, cfg: DictConfig) -> RunStore:
        """Take the run's (or shard's) lock, then record the config and a manifest entry."""
        store = cls(run_dir(cfg), parse_shard(cfg.get("shard")))
        store.folder.mkdir(parents=True, exist_ok=True)
        store.lock.acquire()
        try:
            store._check_sharding()
            write_text_atomic(store.folder / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
            manifest = store.manifest()
            now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            ident = RunIdentity.of(cfg)
            manifest.update(
                identity=ident.as_dict(),
                run_key=ident.key,
                status="running",
                last_start=now,
                environment=environment_info(),
            )
            manifest.setdefault("started", now)
            manifest.setdefault("history", []).append(
                {
                    "start": now,
                    "t_start": time.time(),
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    # how this process decodes (not part of the run's identity)
                    "engine": OmegaConf.to_container(cfg.engine, resolve=True),
                    "batch_size": cfg.batch_size,
                    "threads": cfg.threads,
                }
            )
            store.write_manifest(manifest)
        except BaseException:
            store.lock.release()
            raise
        return store

    def _check_sharding(self) -> None:
        """An unfinished run continues with the sharding it started with."""
        mine = self.samples_path.name
        others = [p.name for p in samples_files(self.folder) if p.name != mine]
        if self.shard:
            others = [n for n in others if not n.endswith(f"-of-{self.shard[1]}.jsonl")]
        if others and not (self.folder / "summary.json").exists():
            raise StoreError(
                f"{self.folder} is an unfinished run decoded with other sharding ({', '.join(others)}); "
                f"this process asks for {'shard ' + '/'.join(map(str, self.shard)) if self.shard else 'no shards'}. "
                "Finish it with the sharding it started with, or delete the folder to start over."
            )

    def manifest(self) -> dict:
        return json.loads(self.manifest_path.read_text()) if self.manifest_path.exists() else {}

    def write_manifest(self, manifest: dict) -> None:
        write_text_atomic(self.manifest_path, json.dumps(manifest, indent=1, default=str))

    def finish(self, status: str = "complete") -> None:
        """Record how this process ended and release the lock."""
        try:
            manifest = self.manifest()
            now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            manifest.update(status=status, ended=now)
            manifest.setdefault("history", [{}])[-1].update(end=now, t_end=time.time(), status=status)
            self.write_manifest(manifest)
        finally:
            self.lock.release()

    def own_samples(self) -> list[dict]:
        """This writer's finished samples (its partial last line, if any, is cut away)."""
        return read_samples_file(self.samples_path, repair=True)

    def samples(self) -> list[dict]:
        """Every finished sample of the run, across shards, each item once, with its paired timing."""
        self.own_samples()  # repair this writer's files first
        read_samples_file(self.timing_path, repair=True)
        return read_samples(self.folder)

    def append(self, record: dict) -> None:
        _append_line(self.samples_path, record)

    def append_timing(self, record: dict) -> None:
        """One item's paired timing (`index`, `stats` with the paired_* fields, `conditions`)."""
        _append_line(self.timing_path, record)

    def write_summary(self, summary: dict) -> None:
        write_text_atomic(self.folder / "summary.json", json.dumps(summary, indent=1, default=str))

    def write_artifact(self, name: str, text: str) -> None:
        write_text_atomic(self.folder / name, text)

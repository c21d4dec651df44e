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

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cactus_bench.app.config import RunSpec, parse_shard
from cactus_bench.app.identity import RunIdentity
from cactus_bench.app.lock import RunLock, slurm_job
from cactus_bench.core.utils import environment_info, write_text_atomic

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
    """The finished samples in one file. A last line cut short by a crash is skipped, and with `repair` cut
    from the file (only its writer may do that); a last line that lacks only its newline is a sample (with
    `repair` its newline is added). A bad line elsewhere (not JSON, not UTF-8, no `index`) is a StoreError
    naming the file and line."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline
    out = [_sample(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if last.strip():
        try:
            out.append(_sample(path, len(lines) + 1, last))
            if repair:
                _append_bytes(path, b"\n")
        except StoreError:
            if repair:
                write_text_atomic(path, b"".join(line + b"\n" for line in lines).decode())
    return out


def _sample(path: Path, n: int, line: bytes) -> dict:
    try:
        record = json.loads(line.decode("utf-8"))
        if not isinstance(record, dict) or "index" not in record:
            raise ValueError("a JSON object with an `index` is expected")
        return record
    except ValueError as e:
        why = getattr(e, "msg", None) or str(e)
        raise StoreError(
            f"{path}, line {n}, is not a valid sample ({why}). The other samples are intact: delete that line "
            f"(`sed -i '{n}d' {path}`) and run the same command again; the run resumes and decodes that item anew."
        ) from None


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


def contents(samples: list[dict]) -> dict:
    """What a summary is computed from, to tell later whether it still is: how many samples, how many of them
    timed, and a digest of every item's statistics (its timing's too, `read_samples`)."""
    h = hashlib.sha256()
    for s in sorted(samples, key=lambda s: str(s["index"])):
        seen = [s["index"], s.get("stats"), s.get("timing_conditions")]
        h.update(json.dumps(seen, sort_keys=True, default=str).encode())
    timed = sum(1 for s in samples if s.get("timing_conditions") is not None)
    return {"samples": len(samples), "timed": timed, "digest": h.hexdigest()[:16]}


def duplicated_items(folder: Path) -> dict:
    """Items stored in more than one line, with where each copy is (`file:line`)."""
    read_samples_file_all(folder)  # a bad line is named first
    where: dict = {}
    for path in samples_files(folder):
        for n, line in enumerate(path.read_bytes().split(b"\n"), 1):
            if line.strip():
                with contextlib.suppress(ValueError, KeyError, TypeError):  # a cut last line: not a sample
                    where.setdefault(json.loads(line)["index"], []).append(f"{path.name}:{n}")
    return {k: v for k, v in where.items() if len(v) > 1}


def read_samples_file_all(folder: Path) -> None:
    for path in samples_files(folder):
        read_samples_file(path)


def _append_line(path: Path, record: dict) -> None:
    _append_bytes(path, (json.dumps(record, default=str) + "\n").encode())


def _append_bytes(path: Path, data: bytes) -> None:
    """Append and fsync; a full disk or a read-only folder is a StoreError naming the file (what is there
    already is intact)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if path.is_symlink():
            raise StoreError(planted_link(path)) from None
        raise StoreError(unwritable(path, e)) from None
    try:
        with os.fdopen(fd, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise StoreError(unwritable(path, e)) from None


def planted_link(path: Path) -> str:
    return (
        f"{path} is a symbolic link (to {os.readlink(path)}): a run's files are its own, never written through "
        "a link, so nothing was written. Remove the link (and check who planted it), then run the same command "
        "again."
    )


def refuse_links(folder: Path) -> None:
    """A run folder holds no symbolic link: appending or replacing through one writes elsewhere."""
    links = sorted(p for p in folder.iterdir() if p.is_symlink()) if folder.is_dir() else []
    if links:
        raise StoreError(planted_link(links[0]))


def unwritable(path: Path, e: OSError) -> str:
    folder = path if path.is_dir() else path.parent
    kept = sum(1 for f in samples_files(folder) for line in f.read_bytes().split(b"\n") if line.strip())
    written = f"The {kept} sample(s) written so far are intact." if kept else "No sample had been written yet."
    return (
        f"cannot write {path} ({e.strerror}). {written} Free space or fix the folder's permissions (or move the "
        "results: paths.results=... / CACTUS_BENCH_RESULTS) and run the same command again to resume."
    )


def _covers_more(limit: int | None, stored: int | None) -> bool:
    """Whether `limit` covers more items than `stored` (None: every item)."""
    return stored is not None and (limit is None or limit > stored)


class RunStore:
    def __init__(self, folder: Path, shard: tuple[int, int] | None = None, identity: RunIdentity | None = None):
        self.folder = Path(folder)
        self.shard = shard
        self.identity = identity  # the run's, computed once by whoever opened it
        suffix = shard_suffix(shard)
        self.samples_path = self.folder / f"samples{suffix}.jsonl"
        self.timing_path = self.folder / f"timing{suffix}.jsonl"
        self.manifest_path = self.folder / f"manifest{suffix}.json"
        self.lock = RunLock(self.folder / f".lock{suffix}")
        self.new = False  # this process made the folder (`open`)
        self.discarded = False

    @classmethod
    def open(cls, spec: RunSpec) -> RunStore:
        """Take the run's (or shard's) lock, then record the config and a manifest entry."""
        cfg, ident = spec.cfg, spec.identity
        store = cls(ident.folder(cfg.paths.runs), parse_shard(cfg.get("shard")), ident)
        store.new = not store.folder.exists()
        try:  # before any model loads: a folder that cannot be written fails now
            store.folder.mkdir(parents=True, exist_ok=True)
            refuse_links(store.folder)
            store.lock.acquire()
        except OSError as e:
            raise StoreError(unwritable(store.folder, e)) from None
        try:
            store._check_sharding()
            manifest = store.manifest()
            resolved = spec.precision
            if store._covers_more(cfg.limit):  # a finished run's config changes only to cover more items
                # with what it resolved to here (precision, weights): the identity, read on any machine
                stored = {**OmegaConf.to_container(cfg, resolve=True), "resolved": ident.resolved}
                store._write(store.folder / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(stored)))
            now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            manifest.update(
                identity=ident.as_dict(),
                run_key=ident.key,
                resolved=manifest.get("resolved") or resolved,
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
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),  # which GPU this process saw
                    "slurm_job": slurm_job(),
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

    def _covers_more(self, limit: int | None) -> bool:
        """Whether a run with `limit` covers more items than the stored config's."""
        path = self.folder / "config.yaml"
        return not path.exists() or _covers_more(limit, OmegaConf.load(path).get("limit"))

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
        if not self.manifest_path.exists():
            return {}
        try:
            return json.loads(self.manifest_path.read_text())
        except ValueError as e:
            raise StoreError(
                f"{self.manifest_path} is not valid JSON ({e}): it was cut short. The samples are intact: delete "
                "it and run the same command again (a new manifest is written)."
            ) from None

    def write_manifest(self, manifest: dict) -> None:
        self._write(self.manifest_path, json.dumps(manifest, indent=1, default=str))

    def _write(self, path: Path, text: str) -> None:
        with self.lock.fenced():
            try:
                write_text_atomic(path, text)
            except OSError as e:
                raise StoreError(unwritable(path, e)) from None

    def discard(self) -> None:
        """A run that never started (its models refused before any item): the folder this process made goes,
        so no empty run is left behind to be found; a folder that was there before is kept as it was."""
        if self.new and not any(self.folder.glob("samples*.jsonl")):
            self.lock.release()
            shutil.rmtree(self.folder, ignore_errors=True)
            self.discarded = True

    def finish(self, status: str = "complete", limit: int | None = None) -> None:
        """Record how this process ended and release the lock. The run's status and limit only move forward:
        a rerun with a smaller limit, or one stopped early, leaves a complete run complete at its limit (the
        rerun's own ending is in its history entry)."""
        if self.discarded:
            return
        if not self.lock.owns():  # taken over while paused: the run's files are the new holder's
            self.lock.release()
            return
        try:
            manifest = self.manifest()
            now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            was_complete = manifest.get("status") == "complete" and (self.folder / "summary.json").exists()
            if status == "complete" or not was_complete:
                manifest["status"] = status
            if status == "complete" and ("limit" not in manifest or _covers_more(limit, manifest["limit"])):
                manifest["limit"] = limit
            manifest["ended"] = now
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
        with self.lock.fenced():
            _append_line(self.samples_path, record)

    def append_timing(self, record: dict) -> None:
        """One item's paired timing (`index`, `stats` with the paired_* fields, `conditions`)."""
        with self.lock.fenced():
            _append_line(self.timing_path, record)

    def stored_summary(self) -> dict | None:
        path = self.folder / "summary.json"
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError:
            return None  # unreadable: the one being written replaces it

    def write_summary(self, summary: dict) -> None:
        self._write(self.folder / "summary.json", json.dumps(summary, indent=1, default=str))

    def write_artifact(self, name: str, text: str) -> None:
        self._write(self.folder / name, text)

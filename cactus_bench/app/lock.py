"""One writer per run folder: an exclusive lock file naming its holder, with a heartbeat and a fence.

The lock is a file created with O_EXCL holding its holder: host, pid, the process's start (boot id and
start time: a pid reused by another process is not the holder), its SLURM job, and a token of its own.
While held, a thread touches it every HEARTBEAT_S seconds. A lock is taken over (one line says so) when
its holder is gone: on this host, a process that has ended or whose pid now belongs to another process;
anywhere, a holder of this very SLURM job before its latest requeue (SLURM_RESTART_COUNT), on any node;
from another host, whose process cannot be checked from here, a heartbeat older than
`CACTUS_BENCH_LOCK_STALE_S` (default 300 s);
a lock file with no readable holder (a full disk cut its write) once it is a few seconds old. A fresh lock
of another host is waited for, a bounded time (`CACTUS_BENCH_LOCK_WAIT_S`, default the stale time and a
heartbeat: long enough for a holder that died to go stale), with a line saying so; a live holder on this
host is refused at once.

A takeover is atomic: a taker first creates a marker file with O_EXCL (one taker at a time), then checks
that the lock still holds the very holder it judged gone, and only then replaces it.

The fence: a holder may have been paused past the stale time (a SLURM suspend, a VM pause) and taken over.
Every write of the run goes through `fenced()`, which checks, under an flock of the lock's gate file, that
the lock still holds this holder's token; a taker passes through the same gate once it holds the lock. So
a write either finished before the takeover (the taker reads it) or finds the lock lost: it raises
`LockLost` and writes nothing, and the heartbeat no longer touches a lock that is not its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HEARTBEAT_S = 30.0
UNWRITTEN_S = 5.0  # a lock file still without its holder after this long was cut short (never written)
MARKER_STALE_S = 60.0  # a takeover marker this old belongs to a taker that died mid-takeover
POLL_S = 2.0  # how often a fresh lock of another host is looked at again while waiting for it
GATE_WAIT_S = 30.0  # a taker waits this long for a write in flight of the holder it replaced
log = logging.getLogger("cactus_bench")


def stale_after() -> float:
    return float(os.environ.get("CACTUS_BENCH_LOCK_STALE_S", "300"))


def wait_for_other_host() -> float:
    return float(os.environ.get("CACTUS_BENCH_LOCK_WAIT_S", stale_after() + HEARTBEAT_S))


class LockHeld(RuntimeError):
    """Another live process writes this run (or this shard of it)."""


class LockLost(RuntimeError):
    """This process's lock was taken over while it was paused: it must write nothing more."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def process_start(pid: int) -> str | None:
    """When process `pid` started, as `<boot id>:<clock ticks since boot>` (Linux); None where unknown. Two
    processes that ever had one pid never share it."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return f"{boot}:{stat.rsplit(')', 1)[1].split()[19]}"  # field 22, counted after the command's name


def slurm_job() -> str | None:
    """The SLURM job (array tasks as <array>_<task>) this process runs in, if any."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')}"
    return env.get("SLURM_JOB_ID")


def slurm_restarts() -> int:
    """How often SLURM has requeued this job (0 before any requeue): a holder of the same job with fewer is
    this job's earlier life; one with as many is a live task of it."""
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)


def _parse(text: str | None) -> dict:
    try:
        holder = json.loads(text) if text else {}
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


class RunLock:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.gate = self.path.with_name(f"{self.path.name}.gate")
        self.held = False
        self.token: str | None = None
        self._beating: threading.Event | None = None

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        token = secrets.token_hex(8)
        holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": process_start(os.getpid()),
            "slurm_job": slurm_job(),
            "slurm_restarts": slurm_restarts(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "token": token,
        }
        with os.fdopen(fd, "w") as f:
            json.dump(holder, f)
        self.token = token
        return True

    def holder(self) -> dict:
        return _parse(self._text())

    def _text(self) -> str | None:
        try:
            return self.path.read_text()
        except OSError:
            return None

    def acquire(self) -> RunLock:
        deadline = None
        while True:
            if self._create():
                return self._held()
            judged = self._text()
            holder = _parse(judged)
            gone = self._gone(holder)
            if gone and self._take_over(judged):
                log.warning("taking over the lock of %s: %s", self.path.parent, gone)
                return self._held()
            holder = self.holder()
            if gone or not holder or holder.get("host") == socket.gethostname():
                break  # a live holder here (or another taker won): refused at once
            if deadline is None:
                deadline = time.monotonic() + wait_for_other_host()
                log.warning(
                    "%s is being written by %s: waiting up to %g s for it to finish or go stale "
                    "(CACTUS_BENCH_LOCK_WAIT_S)",
                    self.path.parent,
                    _who(holder),
                    wait_for_other_host(),
                )
            if time.monotonic() >= deadline:
                break
            time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))
        raise LockHeld(
            f"{self.path.parent} is being written by {_who(self.holder())}: one writer per run. Wait for it to "
            f"finish; a holder on another machine that stops its heartbeat for {stale_after():.0f} s is taken "
            f"over (CACTUS_BENCH_LOCK_STALE_S), or delete {self.path} if you know that process is gone."
        )

    def _take_over(self, judged: str | None) -> bool:
        """Replace the stale lock whose text was `judged`, unless another taker is at it or has done it."""
        marker = self.path.with_name(f"{self.path.name}.takeover")
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - marker.stat().st_mtime > MARKER_STALE_S:
                    marker.unlink()  # its taker died mid-takeover; the next attempt may proceed
            return False
        try:
            os.close(fd)
            if self._text() != judged:  # taken over (or released) since it was judged
                return self._create()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return self._create()
        finally:
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()

    def _gone(self, holder: dict) -> str | None:
        """Why the holder no longer holds the lock, or None while it may."""
        pid = holder.get("pid")
        try:
            silent = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return "its lock file is gone"
        if not holder:
            return "its lock file names no holder (cut short)" if silent > UNWRITTEN_S else None
        job = slurm_job()
        if job is not None and holder.get("slurm_job") == job and slurm_restarts() > holder.get("slurm_restarts", -1):
            return f"it is this SLURM job ({job}) before it was requeued"
        if holder.get("host") == socket.gethostname():
            if not isinstance(pid, int) or not _alive(pid):
                return f"pid {pid} on this host has ended"
            started = holder.get("started")
            if started is not None and process_start(pid) not in (None, started):
                return f"pid {pid} on this host now belongs to another process (its holder ended)"
            return None
        if silent > stale_after():
            return f"pid {pid} on {holder.get('host', '?')} has sent no heartbeat for {silent:.0f} s"
        return None

    def _held(self) -> RunLock:
        self.held = True
        with self._gate(GATE_WAIT_S):  # a write in flight of the holder replaced lands before this one reads
            pass
        self._beating = threading.Event()
        threading.Thread(target=self._beat, args=(self._beating,), daemon=True).start()
        return self

    def owns(self) -> bool:
        """This lock file still holds this holder (not taken over while it was paused)."""
        return self.held and self.token is not None and self.holder().get("token") == self.token

    @contextlib.contextmanager
    def fenced(self) -> Iterator[None]:
        """Around every write of the run: raises LockLost, writing nothing, once the lock was taken over."""
        with self._gate(None):
            if not self.owns():
                self._stop_beating()
                raise LockLost(
                    f"{self.path.parent}: this process's lock was taken over by {_who(self.holder())} while it "
                    "was paused or unreachable (a SLURM suspend, a VM pause), so it writes nothing more and "
                    "stops; the other process goes on with the run. Nothing is lost: what this process stored "
                    "before is kept, and running the same command again after the other one ends resumes."
                )
            yield

    @contextlib.contextmanager
    def _gate(self, wait_s: float | None) -> Iterator[None]:
        """An flock of the gate file: writes and a new holder's first look pass it one at a time. `wait_s`:
        give up waiting after that long (a writer paused inside it), and go on with a warning."""
        with open(self.gate, "a") as f:
            deadline = None if wait_s is None else time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | (fcntl.LOCK_NB if deadline is not None else 0))
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        log.warning("%s: the writer this process replaced is paused inside a write", self.gate)
                        yield
                        return
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                if not self.owns():  # taken over while paused: the new holder's heartbeat is its own
                    return
                os.utime(self.path)
            except OSError:
                return

    def _stop_beating(self) -> None:
        if self._beating is not None:
            self._beating.set()
            self._beating = None

    def release(self) -> None:
        self._stop_beating()
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                if self.owns():
                    self.path.unlink()
            self.held = False

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _who(holder: dict) -> str:
    job = f", SLURM job {holder['slurm_job']}" if holder.get("slurm_job") else ""
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} (since {holder.get('since', '?')}{job})"

"""One writer per run folder: an exclusive lock file naming its holder, with a heartbeat.

The lock is a file created with O_EXCL holding the holder's host and pid; while held, a thread touches it
every HEARTBEAT_S seconds. A second process fails at once with a message naming the holder. A lock is
taken over (one line says so) when its holder is gone: on this host, a dead pid (a requeued job on the same
node has a new pid); from another host, whose process cannot be checked from here, a heartbeat older than
`CACTUS_BENCH_LOCK_STALE_S` (default 300 s): a job pre-empted on one node and requeued on another; a lock
file with no readable holder (a full disk cut its write) once it is a few seconds old.

A takeover is atomic: a taker first creates a marker file with O_EXCL (one taker at a time), then checks
that the lock still holds the very holder it judged gone, and only then replaces it. Two takers that judged
the same stale lock therefore never both hold the run: the second finds the marker, or finds the first's
lock in place of the stale one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

HEARTBEAT_S = 30.0
UNWRITTEN_S = 5.0  # a lock file still without its holder after this long was cut short (never written)
MARKER_STALE_S = 60.0  # a takeover marker this old belongs to a taker that died mid-takeover
log = logging.getLogger("cactus_bench")


def stale_after() -> float:
    return float(os.environ.get("CACTUS_BENCH_LOCK_STALE_S", "300"))


class LockHeld(RuntimeError):
    """Another live process writes this run (or this shard of it)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _parse(text: str | None) -> dict:
    try:
        holder = json.loads(text) if text else {}
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


class RunLock:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.held = False
        self._beating: threading.Event | None = None

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        with os.fdopen(fd, "w") as f:
            json.dump(holder, f)
        return True

    def holder(self) -> dict:
        return _parse(self._text())

    def _text(self) -> str | None:
        try:
            return self.path.read_text()
        except OSError:
            return None

    def acquire(self) -> RunLock:
        if self._create():
            return self._held()
        judged = self._text()
        holder = _parse(judged)
        gone = self._gone(holder)
        if gone and self._take_over(judged):
            log.warning("taking over the lock of %s: %s", self.path.parent, gone)
            return self._held()
        holder = self.holder()
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} (since {holder.get('since', '?')})"
        raise LockHeld(
            f"{self.path.parent} is being written by {who}: one writer per run. Wait for it to finish; a holder "
            f"on another machine that stops its heartbeat for {stale_after():.0f} s is taken over "
            f"(CACTUS_BENCH_LOCK_STALE_S), or delete {self.path} if you know that process is gone."
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
        if holder.get("host") == socket.gethostname():
            return f"pid {pid} on this host has ended" if isinstance(pid, int) and not _alive(pid) else None
        if silent > stale_after():
            return f"pid {pid} on {holder.get('host', '?')} has sent no heartbeat for {silent:.0f} s"
        return None

    def _held(self) -> RunLock:
        self.held = True
        self._beating = threading.Event()
        threading.Thread(target=self._beat, args=(self._beating,), daemon=True).start()
        return self

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                os.utime(self.path)
            except OSError:
                return

    def release(self) -> None:
        if self._beating is not None:
            self._beating.set()
            self._beating = None
        if self.held:
            try:
                if self.holder().get("pid") == os.getpid():
                    self.path.unlink()
            except FileNotFoundError:
                pass
            self.held = False

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

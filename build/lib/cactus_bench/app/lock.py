"""One writer per run folder: an exclusive lock file naming its holder.

The lock is a file created with O_EXCL holding the holder's host and pid. A second process fails at once
with a message naming the holder. A lock left by a process that died on this same host is taken over (a
rename decides which of two would-be takers wins); a lock from another host is never taken over, since its
process cannot be checked from here: the message says how to remove it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path


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


class RunLock:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.held = False

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
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def acquire(self) -> RunLock:
        if self._create():
            self.held = True
            return self
        holder = self.holder()
        here = socket.gethostname()
        if holder.get("host") == here and isinstance(holder.get("pid"), int) and not _alive(holder["pid"]):
            stale = self.path.with_name(f"{self.path.name}.stale-{os.getpid()}")
            try:
                os.rename(self.path, stale)  # only one taker's rename succeeds
                stale.unlink()
            except FileNotFoundError:
                pass
            if self._create():
                self.held = True
                return self
            holder = self.holder()
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} (since {holder.get('since', '?')})"
        raise LockHeld(
            f"{self.path.parent} is being written by {who}: one writer per run. Wait for it to finish, or if "
            f"that process is gone (a job killed on another machine), delete {self.path} and run again."
        )

    def release(self) -> None:
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

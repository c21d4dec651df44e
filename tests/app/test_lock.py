"""One writer per run (app/lock.py): a second writer is refused naming the holder, a stale lock is taken
over once (a dead process, a host whose heartbeat stopped), and the lock comes before any model loads."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from cactus_bench.app import run as run_mod
from cactus_bench.app.config import validate
from cactus_bench.app.lock import LockHeld, RunLock
from cactus_bench.app.store import RunStore, read_samples, run_dir

from ..helpers.configs import cfg_of
from ..helpers.guards import refuse
from ..helpers.runs import TINY


def _race_for(path: str, go, delay: float, won) -> None:
    """One would-be taker: judge the stale lock, wait (widening the race), then try to take it over."""
    from cactus_bench.app import lock as lock_mod

    judge = lock_mod.RunLock._gone

    def slow_judge(self, holder):
        verdict = judge(self, holder)
        time.sleep(delay)
        return verdict

    lock_mod.RunLock._gone = slow_judge
    go.wait()
    try:
        lock_mod.RunLock(path).acquire()  # held until the process exits: the stale one is gone by then
        won.put(os.getpid())
    except LockHeld:
        won.put(None)


def test_a_lock_from_another_host_is_taken_over_only_after_its_heartbeat_stops(tmp_path, monkeypatch, caplog):
    lock = tmp_path / ".lock"
    lock.write_text(json.dumps({"host": "node-7", "pid": 4242, "since": "then"}))
    with pytest.raises(LockHeld, match="node-7"):  # its heartbeat is fresh: a live job elsewhere
        RunLock(lock).acquire()
    old = time.time() - 301
    os.utime(lock, (old, old))  # pre-empted: no heartbeat for five minutes
    taken = RunLock(lock).acquire()
    assert json.loads(lock.read_text())["host"] == socket.gethostname()
    assert "taking over the lock" in caplog.text and "node-7 has sent no heartbeat" in caplog.text
    monkeypatch.setattr("cactus_bench.app.lock.HEARTBEAT_S", 0.05)
    taken.release()
    beating = RunLock(lock).acquire()  # a held lock's file is touched while its writer lives
    os.utime(lock, (old, old))
    deadline = time.monotonic() + 60  # a loaded machine may run the heartbeat thread late, not never
    while lock.stat().st_mtime == old and time.monotonic() < deadline:
        time.sleep(0.05)
    assert time.time() - lock.stat().st_mtime < 60  # touched again: not the old mtime, a fresh one
    beating.release()


def test_the_lock_is_taken_before_the_models_load(small_pair_dir, tmp_path, monkeypatch):
    cfg = cfg_of(*TINY, "method=sps", "limit=2", results=tmp_path, pair_dir=small_pair_dir)
    holder = RunStore.open(validate(cfg))
    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded the pair before the lock"))
    with pytest.raises(LockHeld):
        run_mod.run(cfg)
    holder.finish("interrupted")


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    first = RunLock(tmp_path / ".lock").acquire()
    with pytest.raises(LockHeld, match=f"pid {os.getpid()} on {socket.gethostname()}"):
        RunLock(tmp_path / ".lock").acquire()
    first.release()
    RunLock(tmp_path / ".lock").acquire().release()  # free again


def test_a_stale_lock_from_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "since": "then"}))
    lock = RunLock(tmp_path / ".lock").acquire()
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
    lock.release()
    (tmp_path / ".lock").write_text(json.dumps({"host": "another-node", "pid": dead.pid}))
    with pytest.raises(LockHeld, match="another-node"):  # another host's lock: never taken over from here
        RunLock(tmp_path / ".lock").acquire()


def test_many_takers_racing_for_one_stale_lock_leave_exactly_one_holder(tmp_path):
    """Eight processes judge the same dead holder's lock at once, each pausing between judging and taking
    over (as a loaded machine might): exactly one holds the run, every time, and the lock names it. (The
    rename-based takeover this replaced let a late taker move the winner's fresh lock away: two holders.)"""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for r in range(4):
        path = tmp_path / f".lock{r}"
        path.write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "since": "then"}))
        go, won = ctx.Event(), ctx.Queue()
        takers = [ctx.Process(target=_race_for, args=(str(path), go, 0.02 * (i % 4), won)) for i in range(8)]
        for t in takers:
            t.start()
        go.set()
        results = [won.get(timeout=60) for _ in takers]
        holders = [pid for pid in results if pid is not None]
        for t in takers:
            t.join(timeout=60)
        assert len(holders) == 1, results
        assert json.loads(path.read_text())["pid"] == holders[0]
        assert not path.with_name(path.name + ".takeover").exists()


def test_a_lock_file_without_a_holder_is_taken_over_once_it_is_a_few_seconds_old(tmp_path):
    """A full disk can leave the lock created but empty: no holder to wait for, so no 300 s wait either.
    A just-created one (its creator about to write) is left alone."""
    path = tmp_path / ".lock"
    path.write_text("")
    with pytest.raises(LockHeld):
        RunLock(path).acquire()
    old = time.time() - 10
    os.utime(path, (old, old))
    RunLock(path).acquire().release()


def test_two_runs_of_one_config_at_once_never_duplicate(small_pair_dir, tmp_path):
    cfg = cfg_of(*TINY, "method=sps", "limit=3", results=tmp_path, pair_dir=small_pair_dir)
    holder = RunStore.open(validate(cfg))  # another process is writing this run
    with pytest.raises(LockHeld, match="one writer per run"):
        run_mod.run(cfg)
    holder.finish("interrupted")
    run_mod.run(cfg)
    assert [s["index"] for s in read_samples(run_dir(cfg))] == [0, 1, 2]

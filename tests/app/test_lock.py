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
    monkeypatch.setenv("CACTUS_BENCH_LOCK_WAIT_S", "0")  # refused at once (the wait has its own test)
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


def test_a_stale_lock_from_a_dead_process_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("CACTUS_BENCH_LOCK_WAIT_S", "0")
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


# --- the fence: a writer taken over while paused writes nothing more -------------------------------------


def _paused_and_taken_over(folder):
    """A store whose writer holds its lock, then is judged gone (as if paused on another node past the stale
    time) and taken over by a second store; returns (the first, the second)."""
    first = RunStore(folder)
    folder.mkdir(parents=True, exist_ok=True)
    first.lock.acquire()
    first.append({"index": 0, "stats": {}})
    held = json.loads(first.lock.path.read_text())
    first.lock.path.write_text(json.dumps({**held, "host": "node-7"}))  # its own token, seen from elsewhere
    old = time.time() - 400
    os.utime(first.lock.path, (old, old))
    second = RunStore(folder)
    second.lock.acquire()
    return first, second


def test_a_writer_whose_lock_was_taken_over_writes_nothing_more(tmp_path, caplog):
    from cactus_bench.app.lock import LockLost

    first, second = _paused_and_taken_over(tmp_path / "run")
    assert "node-7 has sent no heartbeat" in caplog.text
    with pytest.raises(LockLost, match="taken over by pid .* while it was paused"):
        first.append({"index": 1, "stats": {}})
    with pytest.raises(LockLost):
        first.write_summary({"samples": 1})
    first.finish("interrupted")  # writes no manifest, leaves the new holder's lock alone
    assert not first.manifest_path.exists() and second.lock.owns()
    second.append({"index": 1, "stats": {}})
    assert [s["index"] for s in read_samples(tmp_path / "run")] == [0, 1]
    assert not (tmp_path / "run" / "summary.json").exists()
    second.lock.release()
    assert not second.lock.path.exists()


def test_a_heartbeat_stops_touching_a_lock_it_no_longer_holds(tmp_path, monkeypatch):
    monkeypatch.setattr("cactus_bench.app.lock.HEARTBEAT_S", 0.05)
    first, second = _paused_and_taken_over(tmp_path / "run")
    second.lock._stop_beating()  # only the first's heartbeat runs now
    old = time.time() - 1000
    os.utime(second.lock.path, (old, old))
    time.sleep(0.5)
    assert second.lock.path.stat().st_mtime == old
    second.lock.release()


def test_a_requeued_slurm_job_takes_over_its_own_lock_from_any_node(tmp_path, monkeypatch):
    lock = tmp_path / ".lock"
    lock.write_text(json.dumps({"host": "node-3", "pid": 99, "slurm_job": "4711", "slurm_restarts": 0, "since": "x"}))
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    monkeypatch.setenv("CACTUS_BENCH_LOCK_WAIT_S", "0")
    with pytest.raises(LockHeld, match="SLURM job 4711"):  # a live task of the same job (not requeued since)
        RunLock(lock).acquire()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    taken = RunLock(lock).acquire()  # fresh heartbeat, another node: but it is this job, before its requeue
    assert json.loads(lock.read_text())["slurm_restarts"] == 1 and taken.owns()
    taken.release()


def test_a_fresh_lock_of_another_host_is_waited_for_a_bounded_time(tmp_path, monkeypatch, caplog):
    import threading

    lock = tmp_path / ".lock"
    lock.write_text(json.dumps({"host": "node-7", "pid": 4242, "since": "then"}))
    monkeypatch.setenv("CACTUS_BENCH_LOCK_WAIT_S", "0.5")
    monkeypatch.setattr("cactus_bench.app.lock.POLL_S", 0.05)
    start = time.monotonic()
    with pytest.raises(LockHeld, match="node-7"):
        RunLock(lock).acquire()
    assert 0.5 <= time.monotonic() - start < 30
    assert "waiting up to 0.5 s" in caplog.text and "node-7" in caplog.text
    monkeypatch.setenv("CACTUS_BENCH_LOCK_WAIT_S", "60")
    threading.Timer(0.3, lock.unlink).start()  # the other host's run finishes while this one waits
    RunLock(lock).acquire().release()


def test_a_same_host_pid_that_belongs_to_another_process_is_no_holder(tmp_path, caplog):
    """pid reuse, or pid 1 in a container restarted under the same host name: the pid is alive but started
    after the holder did, so the lock is taken over; the holder's own process is never judged gone."""
    from cactus_bench.app.lock import process_start

    lock = tmp_path / ".lock"
    for pid in (1, os.getpid()):
        lock.write_text(json.dumps({"host": socket.gethostname(), "pid": pid, "started": "other-boot:1", "since": "x"}))
        RunLock(lock).acquire().release()
        assert "now belongs to another process" in caplog.text
    mine = {"host": socket.gethostname(), "pid": os.getpid(), "started": process_start(os.getpid()), "since": "x"}
    lock.write_text(json.dumps(mine))
    with pytest.raises(LockHeld):
        RunLock(lock).acquire()


@pytest.mark.slow  # a whole run paused and resumed beside the run that took it over (about 30 s)
def test_a_run_paused_past_the_stale_time_stops_when_it_resumes_and_stores_nothing_twice(
    small_pair_dir, tmp_path, monkeypatch
):
    """SIGSTOP a run mid-way (a SLURM suspend), let another writer take it over (its lock seen from another
    host, silent past CACTUS_BENCH_LOCK_STALE_S) and finish it, then SIGCONT the first: it adds no line, stops
    with one paragraph, and the store holds each item once."""
    import signal

    from cactus_bench.app.store import duplicated_items

    from ..helpers.configs import pair_overrides

    over = (*TINY[:-2], "max_gen_toks=48", "progress=false", "method=sps", "limit=40")
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "cactus_bench", *over, *pair_overrides(small_pair_dir), f"paths.runs={runs}"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cfg = cfg_of(*over, results=runs, pair_dir=small_pair_dir)
    samples = run_dir(cfg) / "samples.jsonl"
    deadline = time.monotonic() + 300
    while not (samples.exists() and len(samples.read_text().splitlines()) >= 3):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        lock = run_dir(cfg) / ".lock"
        lock.write_text(json.dumps({**json.loads(lock.read_text()), "host": "node-7"}))
        old = time.time() - 10
        os.utime(lock, (old, old))
        monkeypatch.setenv("CACTUS_BENCH_LOCK_STALE_S", "5")
        before = len(samples.read_text().splitlines())
        run_mod.run(cfg)  # takes over, decodes the rest, summarises
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 2 and "lock was taken over" in " ".join(err.split()), err[-2000:]
    lines = samples.read_text().splitlines()
    assert len(lines) == 40 >= before and duplicated_items(run_dir(cfg)) == {}
    assert json.loads((run_dir(cfg) / "summary.json").read_text())["samples"] == 40


def test_a_worker_that_finds_every_gpu_slot_held_says_so_and_waits_for_one(tmp_path, caplog):
    """`hydra/launcher=local_gpus`: slots are lock files under the results folder (not the shared /tmp);
    with both held, a third worker waits, saying why, and takes the first one released."""
    import fcntl
    import threading

    from cactus_bench.app.cluster import take_slot

    folder = tmp_path / "results" / ".gpu-slots"
    held = [take_slot(folder, 2, poll_s=0.05) for _ in range(2)]
    assert [slot for slot, _ in held] == [0, 1]
    got = []
    waiter = threading.Thread(target=lambda: got.append(take_slot(folder, 2, poll_s=0.05)))
    waiter.start()
    time.sleep(0.5)
    assert not got and "all 2 GPU slot(s)" in caplog.text and str(folder) in caplog.text
    fcntl.flock(held[1][1], fcntl.LOCK_UN)  # the second worker ends
    waiter.join(timeout=30)
    assert got and got[0][0] == 1

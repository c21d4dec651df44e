"""The run store (app/store.py, app/runs.py): what a run writes and reads back, how it resumes (after a
kill, at another batch size, in shards), and what it refuses, each in one paragraph with the store intact."""

import errno
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cactus_bench.app import method_configs  # noqa: F401  (the method group Hydra composes)
from cactus_bench.app import run as run_mod
from cactus_bench.app.config import ConfigError, validate
from cactus_bench.app.lock import LockHeld
from cactus_bench.app.runs import load_runs
from cactus_bench.app.schema import CONF_DIR
from cactus_bench.app.store import RunStore, StoreError, read_samples, read_samples_file, run_dir
from cactus_bench.tools.report import render_table

from ..helpers.configs import cfg_of, pair_overrides
from ..helpers.guards import refuse
from ..helpers.runs import SHARDED, TINY, demo_spec, run_cell, run_killed_after

ROOT = Path(__file__).resolve().parents[2]


def test_a_smaller_limit_never_shrinks_the_summary_and_tables_state_their_items(small_pair_dir, tmp_path):
    """Rerunning a finished 6-item run with limit=2 reads 2 items without touching its summary; a table
    over runs of different sizes computes every cell, Rej included, on the items they share, and says n."""
    for method in ("ar", "sps"):
        run_cell(method, results=tmp_path, pair_dir=small_pair_dir)
    folder = run_dir(cfg_of(*TINY, "method=sps", "limit=6", results=tmp_path, pair_dir=small_pair_dir))
    before = (folder / "summary.json").read_text()
    small = run_cell("sps", results=tmp_path, pair_dir=small_pair_dir, limit=2)
    assert small["samples"] == 2 and (folder / "summary.json").read_text() == before
    run_cell("tas", results=tmp_path, pair_dir=small_pair_dir, limit=4)  # a run of fewer items beside them
    spec = demo_spec()
    md, _ = render_table(spec, load_runs(tmp_path), tmp_path / "t", pair_overrides(small_pair_dir))
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert rows["SpS"].rstrip(" |").endswith("4") and rows["TAS"].rstrip(" |").endswith("4")
    assert "every cell is computed on the 4 items all its runs share" in md


def test_a_smaller_rerun_changes_nothing_a_finished_run_stored(small_pair_dir, tmp_path):
    """A finished 6-item run (batched, with a 3-item timing sample), rerun at limit=2: its config, manifest
    status and limit, summary and timing lines are as they were (before, the config and manifest said limit=2
    and the timing sample of the 2-item subset was appended)."""
    common = ("batch_size=4", "timing_sample=3")
    run_cell("sps", *common, results=tmp_path, pair_dir=small_pair_dir)
    folder = run_dir(cfg_of(*TINY, "method=sps", "limit=6", *common, results=tmp_path, pair_dir=small_pair_dir))
    files = ("config.yaml", "summary.json", "timing.jsonl")
    before = {name: (folder / name).read_text() for name in files}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["limit"] == 6 and len(before["timing.jsonl"].splitlines()) == 3
    run_cell("sps", *common, results=tmp_path, pair_dir=small_pair_dir, limit=2)
    assert {name: (folder / name).read_text() for name in files} == before
    after = json.loads((folder / "manifest.json").read_text())
    assert (after["status"], after["limit"]) == ("complete", 6) and len(after["history"]) == 2


def test_a_runs_identity_holds_the_precision_auto_resolved_to(small_pair_dir, tmp_path, monkeypatch):
    """dtype=auto is float32 on a CPU and bfloat16 on CUDA. On a CPU, `auto` and `float32` are one run (the
    second finds it done; before, two folders and two table rows); continued where CUDA is found, `auto` is
    another run (before: a refused resume); the CPU run, read there, keeps its identity (its stored
    `resolved`)."""
    import torch

    from cactus_bench.app.runs import load_runs

    auto = ("pair.dtype=auto", "pair.device=auto")
    first = run_cell("sps", *auto, results=tmp_path, pair_dir=small_pair_dir, limit=2)
    cpu = run_dir(cfg_of(*TINY, "method=sps", *auto, results=tmp_path, pair_dir=small_pair_dir))
    pinned = run_cell("sps", "pair.dtype=float32", results=tmp_path, pair_dir=small_pair_dir, limit=2)
    assert pinned["run_key"] == first["run_key"] and [p.name for p in cpu.parent.iterdir()] == [cpu.name]
    assert len(json.loads((cpu / "manifest.json").read_text())["history"]) == 2  # resumed: found done
    assert json.loads((cpu / "manifest.json").read_text())["resolved"]["drafter_dtype"] == "float32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # this machine "has" a GPU now
    gpu = run_dir(cfg_of(*TINY, "method=sps", *auto, results=tmp_path, pair_dir=small_pair_dir))
    assert gpu != cpu and gpu.parent == cpu.parent  # another run, in a folder of its own
    (stored,) = load_runs(tmp_path)
    assert stored.folder == cpu and stored.key == first["run_key"]  # read here, the CPU run is still itself


def test_an_unreadable_neighbour_is_skipped_with_one_warning(small_pair_dir, tmp_path, caplog):
    run_cell("sps", results=tmp_path, pair_dir=small_pair_dir)
    broken = tmp_path / "arith" / "small" / "broken_run"
    shutil.copytree(next((tmp_path / "arith" / "small").iterdir()), broken)
    (broken / "summary.json").write_text('{"samples": 3, "sco')  # cut short
    other = tmp_path / "arith" / "small" / "no_config"
    shutil.copytree(broken, other)
    (other / "summary.json").write_text("{}")
    (other / "config.yaml").write_text("method: [")
    runs = load_runs(tmp_path)
    assert len(runs) == 1 and caplog.text.count("skipping") == 2 and "broken_run" in caplog.text
    md, path = render_table(demo_spec(), runs, tmp_path / "t", pair_overrides(small_pair_dir))
    assert path is not None and "SpS" in md


def test_a_folder_that_cannot_be_written_fails_before_the_models_load(small_pair_dir, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")  # paths.runs under a file: nothing can be created there
    cfg = cfg_of(*TINY, "method=sps", "limit=2", results=tmp_path / "file" / "runs", pair_dir=small_pair_dir)
    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded the pair first"))
    with pytest.raises(StoreError, match="cannot write .*file/runs.*Free space or fix the folder's permissions"):
        run_mod.run(cfg)


def test_a_full_disk_names_the_file_and_keeps_what_was_written(small_pair_dir, tmp_path, monkeypatch):
    cfg = cfg_of(*TINY, "method=sps", "limit=4", results=tmp_path, pair_dir=small_pair_dir)
    from cactus_bench.app import store as store_mod

    real, writes = os.fsync, []

    def fsync(fd):
        writes.append(fd)
        if len(writes) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(store_mod.os, "fsync", fsync)
    with pytest.raises(StoreError, match=r"cannot write .*samples.jsonl \(No space left on device\)") as e:
        run_mod.run(cfg)
    monkeypatch.setattr(store_mod.os, "fsync", real)
    said = re.search(r"The (\d+) sample\(s\) written so far are intact", str(e.value))
    assert said and int(said.group(1)) == len(read_samples(run_dir(cfg))) > 0  # the count it says is what is there
    assert run_mod.run(cfg)["samples"] == 4  # the same command resumes
    unborn = tmp_path / "never" / "samples.jsonl"
    assert "No sample had been written yet" in store_mod.unwritable(unborn, OSError(errno.ENOSPC, "full"))


def test_a_truncated_manifest_is_named(small_pair_dir, tmp_path):
    cfg = cfg_of(*TINY, "method=sps", "limit=1", results=tmp_path, pair_dir=small_pair_dir)
    run_mod.run(cfg)
    (run_dir(cfg) / "manifest.json").write_text('{"status": "compl')
    with pytest.raises(StoreError, match="manifest.json is not valid JSON"):
        run_mod.run(cfg)


def test_sample_lines_a_reader_keeps_and_those_it_names(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b'{"index": 0, "id": 0}\n{"index": 1, "id": 1}')  # the last newline never written
    assert [s["index"] for s in read_samples_file(path, repair=True)] == [0, 1]
    assert path.read_bytes().endswith(b"}\n")  # kept, and its newline added
    for bad, why in ((b'{"index": 0}\n\xff\xfe\n{"index": 2}\n', "utf-8"), (b'{"index": 0}\n{"id": 5}\n', "index")):
        path.write_bytes(bad)
        with pytest.raises(StoreError, match=f"line 2, is not a valid sample .*{why}.*sed -i '2d'"):
            read_samples_file(path)


def test_a_run_killed_at_batch_16_resumes_at_batch_4_with_every_item_once(small_pair_dir, tmp_path, monkeypatch):
    cfg16 = cfg_of(*TINY, "method=cactus", "limit=24", "batch_size=16", results=tmp_path, pair_dir=small_pair_dir)
    assert len(run_killed_after(cfg16, 9, monkeypatch)) == 9
    cfg4 = cfg_of(*TINY, "method=cactus", "limit=24", "batch_size=4", results=tmp_path, pair_dir=small_pair_dir)
    assert run_dir(cfg4) == run_dir(cfg16)  # the batch size is not part of the run's identity
    summary = run_mod.run(cfg4)
    indices = [s["index"] for s in read_samples(run_dir(cfg4))]
    assert sorted(indices) == list(range(24)) and summary["samples"] == 24
    history = json.loads((run_dir(cfg4) / "manifest.json").read_text())["history"]
    assert [h["batch_size"] for h in history] == [16, 4]  # recorded per process


def test_a_single_item_run_summarises(small_pair_dir, tmp_path):
    summary = run_mod.run(cfg_of(*TINY, "method=sps", "limit=1", results=tmp_path, pair_dir=small_pair_dir))
    assert summary["samples"] == 1 and summary["score"] is not None and summary["score_stderr"] is None
    folder = run_dir(cfg_of(*TINY, "method=sps", "limit=1", results=tmp_path, pair_dir=small_pair_dir))
    assert json.loads((folder / "manifest.json").read_text())["status"] == "complete"


def test_readers_count_each_item_once(tmp_path):
    line = json.dumps({"index": 0, "id": 0, "stats": {}}) + "\n"
    (tmp_path / "samples.jsonl").write_text(line + line + json.dumps({"index": 1, "id": 1, "stats": {}}) + "\n")
    assert [s["index"] for s in read_samples(tmp_path)] == [0, 1]


def test_a_corrupt_line_names_the_file_and_line_and_the_run_recovers(small_pair_dir, tmp_path):
    cfg = cfg_of(*TINY, "method=sps", "limit=3", results=tmp_path, pair_dir=small_pair_dir)
    run_mod.run(cfg)
    path = run_dir(cfg) / "samples.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(StoreError, match=r"samples.jsonl, line 2.*sed -i '2d'"):
        run_mod.run(cfg)
    subprocess.run(["sed", "-i", "2d", str(path)], check=True)
    assert run_mod.run(cfg)["samples"] == 3


def test_result_files_follow_the_umask(small_pair_dir, tmp_path):
    old = os.umask(0o022)
    try:
        cfg = cfg_of(*TINY, "method=sps", "limit=1", results=tmp_path, pair_dir=small_pair_dir)
        run_mod.run(cfg)
    finally:
        os.umask(old)
    for name in ("config.yaml", "manifest.json", "summary.json", "samples.jsonl"):
        assert stat.S_IMODE((run_dir(cfg) / name).stat().st_mode) == 0o644, name


def test_chaos_every_item_once(small_pair_dir, tmp_path, monkeypatch):
    """Two writers, a kill mid-append, a corrupt line and a stale lock: the run ends with every item once."""
    cfg = cfg_of(*TINY, "method=sps", "limit=4", results=tmp_path, pair_dir=small_pair_dir)
    from cactus_bench.adapters.benchmarks.task import TaskBenchmark

    real = TaskBenchmark.decode
    run_killed_after(cfg, 2, monkeypatch)
    folder = run_dir(cfg)
    with open(folder / "samples.jsonl", "a") as f:
        f.write('{"index": 2, "id": 2, "resp')  # the kill cut a line short
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid}))  # stale
    second = RunStore.open(validate(cfg))  # takes the stale lock over; a concurrent writer is now refused
    with pytest.raises(LockHeld):
        run_mod.run(cfg)
    second.samples()  # a writer first cuts the half-written line
    second.append(json.loads((folder / "samples.jsonl").read_text().splitlines()[0]))  # a duplicate line
    second.finish("interrupted")
    with pytest.raises(StoreError, match="stored more than once"):
        run_mod.run(cfg)  # a duplicated item is refused at merge, by name
    seen, kept = set(), []
    for line in (folder / "samples.jsonl").read_text().splitlines():  # what the message says to do
        index = json.loads(line)["index"]
        if index not in seen:
            seen.add(index)
            kept.append(line)
    (folder / "samples.jsonl").write_text("\n".join(kept) + "\n")
    summary = run_mod.run(cfg)
    indices = [s["index"] for s in read_samples(folder)]
    assert sorted(indices) == [0, 1, 2, 3] and len(indices) == 4 and summary["samples"] == 4
    # a SIGTERM while a larger run goes on, a rerun with a smaller limit, an unreadable neighbour
    bigger = cfg_of(*TINY, "method=sps", "limit=6", results=tmp_path, pair_dir=small_pair_dir)

    def terminated(self, decoder, items):
        yield from ()
        raise run_mod.Terminated("SIGTERM")

    TaskBenchmark.decode = terminated
    try:
        with pytest.raises(run_mod.Terminated):
            run_mod.run(bigger)
    finally:
        TaskBenchmark.decode = real
    assert not (folder / ".lock").exists()
    assert json.loads((folder / "summary.json").read_text())["samples"] == 4
    assert (
        run_mod.run(cfg_of(*TINY, "method=sps", "limit=2", results=tmp_path, pair_dir=small_pair_dir))["samples"] == 2
    )
    assert json.loads((folder / "summary.json").read_text())["samples"] == 4  # never shrinks
    neighbour = folder.parent / "neighbour"
    neighbour.mkdir()
    (neighbour / "summary.json").write_text("{")
    (neighbour / "config.yaml").write_text("{")
    assert run_mod.run(bigger)["samples"] == 6
    runs = load_runs(tmp_path)
    assert len(runs) == 1 and sorted(s["index"] for s in runs[0].samples) == list(range(6))


def test_two_shards_give_the_unsharded_samples_token_for_token(small_pair_dir, tmp_path):
    whole = run_mod.run(cfg_of(*SHARDED, results=tmp_path / "one", pair_dir=small_pair_dir))
    first = run_mod.run(cfg_of(*SHARDED, "shard=0/2", results=tmp_path / "two", pair_dir=small_pair_dir))
    assert not first["complete"] and first["missing_shards"] == ["1/2"]  # named, and no summary yet
    folder = run_dir(cfg_of(*SHARDED, "shard=0/2", results=tmp_path / "two", pair_dir=small_pair_dir))
    assert not (folder / "summary.json").exists()
    assert {p.name for p in folder.glob("samples*.jsonl")} == {"samples.shard-0-of-2.jsonl"}
    merged = run_mod.run(cfg_of(*SHARDED, "shard=1/2", results=tmp_path / "two", pair_dir=small_pair_dir))
    assert merged["complete"] and (folder / "summary.json").exists()
    one = {
        s["index"]: s["tokens"]
        for s in read_samples(run_dir(cfg_of(*SHARDED, results=tmp_path / "one", pair_dir=small_pair_dir)))
    }
    two = {s["index"]: s["tokens"] for s in read_samples(folder)}
    assert one == two and len(one) == 5
    assert merged["accepted_length"] == whole["accepted_length"] and merged["score"] == whole["score"]


def test_a_duplicated_item_is_refused_at_merge(small_pair_dir, tmp_path):
    for shard in ("0/2", "1/2"):
        run_mod.run(cfg_of(*SHARDED, f"shard={shard}", results=tmp_path, pair_dir=small_pair_dir))
    folder = run_dir(cfg_of(*SHARDED, "shard=0/2", results=tmp_path, pair_dir=small_pair_dir))
    copy = (folder / "samples.shard-0-of-2.jsonl").read_text().splitlines()[0]
    with open(folder / "samples.shard-1-of-2.jsonl", "a") as f:
        f.write(copy + "\n")
    n = len((folder / "samples.shard-1-of-2.jsonl").read_text().splitlines())  # the copy's line: named, with the fix
    with pytest.raises(
        StoreError,
        match=rf"item 0 is stored more than once \(at samples.shard-0-of-2.jsonl:1, samples.shard-1-of-2.jsonl:{n};"
        rf".*sed -i '{n}d'",
    ):
        run_mod.run(cfg_of(*SHARDED, "shard=1/2", results=tmp_path, pair_dir=small_pair_dir))


def test_one_writer_per_shard_and_the_other_shard_goes_on(small_pair_dir, tmp_path):
    holder = RunStore.open(validate(cfg_of(*SHARDED, "shard=0/2", results=tmp_path, pair_dir=small_pair_dir)))
    with pytest.raises(LockHeld, match=r"\.lock\.shard-0-of-2|being written by"):
        run_mod.run(cfg_of(*SHARDED, "shard=0/2", results=tmp_path, pair_dir=small_pair_dir))
    assert not run_mod.run(cfg_of(*SHARDED, "shard=1/2", results=tmp_path, pair_dir=small_pair_dir))["complete"]
    holder.finish("interrupted")


def test_an_unfinished_run_keeps_its_sharding(small_pair_dir, tmp_path):
    run_mod.run(cfg_of(*SHARDED, "shard=0/2", results=tmp_path, pair_dir=small_pair_dir))
    with pytest.raises(StoreError, match="other sharding"):
        run_mod.run(cfg_of(*SHARDED, "shard=0/3", results=tmp_path, pair_dir=small_pair_dir))
    with pytest.raises(StoreError, match="other sharding"):
        run_mod.run(cfg_of(*SHARDED, results=tmp_path, pair_dir=small_pair_dir))


def test_shard_values_are_checked():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for bad in ("3/2", "1", "a/b", "-1/2"):
            with pytest.raises(ConfigError, match="shard="):
                validate(compose("config", overrides=[f"shard={bad}"]))


HOLD = Path(__file__).parent / "helpers" / "hold"  # its sitecustomize holds a run after its first sample


def slow_run(tmp_path, pair_dir, *extra):
    """A CLI run of 200 GSM8K prompts that stops after its first sample until a signal comes (a file that
    never appears: tests/helpers/hold), so a signal finds it mid-run however fast this machine decodes (a
    fast one finished all 200 before the signal)."""
    env = {**os.environ, "CACTUS_BENCH_RESULTS": str(tmp_path)}
    env.update(CACTUS_TEST_HOLD_AFTER="1", CACTUS_TEST_HOLD_RELEASE=str(tmp_path / "never"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOLD), os.environ.get("PYTHONPATH")]))
    args = ["pair=tiny", "data=gsm8k", "method=ar", "limit=200", "max_gen_toks=64", "progress=false"]
    cmd = [sys.executable, "-m", "cactus_bench", *args, *pair_overrides(pair_dir), *extra]
    return subprocess.Popen(  # Ctrl-C as at a terminal (a CI job may start us with SIGINT ignored, and the run too)
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_samples(root: Path, pattern: str, n: int = 1, timeout: float = 120) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for path in root.glob(pattern):
            if len(read_samples_file(path)) >= n:
                return path
        time.sleep(0.05)
    raise AssertionError("no samples appeared")


def test_a_signal_whose_exception_was_swallowed_still_ends_the_run_at_the_next_item(small_pair_dir, tmp_path):
    """Python runs a signal handler in whatever frame is current; raised inside a finalizer, its exception is
    printed and dropped, and the run went on (a Ctrl-C under a loaded CI machine left a run decoding for
    minutes). The signal is remembered: the item decoded meanwhile is not stored and the run ends."""
    from cactus_bench.adapters.benchmarks.task import TaskBenchmark

    real = TaskBenchmark.decode

    def swallowing(self, decoder, items):
        for n, record in enumerate(real(self, decoder, items)):
            if n == 1:
                try:  # what a finalizer does with the handler's exception
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(1)  # the handler runs here
                except KeyboardInterrupt:
                    pass
            yield record

    cfg = cfg_of(*TINY, "method=ar", "limit=4", results=tmp_path, pair_dir=small_pair_dir)
    TaskBenchmark.decode = swallowing
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's (CI may start us ignoring it)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_mod.run(cfg)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the run's handler is gone
    finally:
        TaskBenchmark.decode = real
        signal.signal(signal.SIGINT, before)
    folder = run_dir(cfg)
    assert [s["index"] for s in read_samples(folder)] == [0]  # the second item, decoded after the signal: dropped
    assert json.loads((folder / "manifest.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize("sig,code,name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_signal_ends_a_run_in_one_line_with_the_store_intact(small_pair_dir, tmp_path, sig, code, name):
    """SIGTERM (scancel, pre-emption) like Ctrl-C: the sample in flight is dropped, every stored line is
    whole, the lock released, the run marked interrupted, one line said; the same command resumes."""
    proc = slow_run(tmp_path, small_pair_dir)
    samples = wait_for_samples(tmp_path / "runs", "gsm8k/small/ar_s0_*/samples.jsonl")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert f"interrupted ({name})" in err and "Traceback" not in err
    folder = samples.parent
    assert all(line.endswith("}") for line in samples.read_text().splitlines())  # nothing torn
    assert not (folder / ".lock").exists()
    assert json.loads((folder / "manifest.json").read_text())["status"] == "interrupted"


def test_new_weights_written_to_a_local_models_folder_make_another_run(small_pair_dir, tmp_path):
    """A run of pair.verifier=<folder>, new weights written to that folder, and a rerun: it said "2 already
    done" and, with limit=3, one summary mixed two verifiers' items. A local model is its content: the rerun
    is another run, and the first keeps its two items and its identity. Unchanged weights resume (the
    control)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from cactus_bench.app.runs import load_runs

    models, results = tmp_path / "models", tmp_path / "runs"
    shutil.copytree(small_pair_dir, models)
    first = run_cell("sps", results=results, pair_dir=models, limit=2)
    assert run_cell("sps", results=results, pair_dir=models, limit=2)["run_key"] == first["run_key"]
    model = AutoModelForCausalLM.from_pretrained(models / "verifier")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    model.save_pretrained(models / "verifier")  # new weights, same folder
    second = run_cell("sps", results=results, pair_dir=models, limit=3)
    assert second["run_key"] != first["run_key"] and second["samples"] == 3
    stored = {r.key: r for r in load_runs(results)}
    assert set(stored) == {first["run_key"], second["run_key"]} and stored[first["run_key"]].summary["samples"] == 2


def test_a_symbolic_link_planted_in_a_run_folder_is_refused_and_writes_nothing(small_pair_dir, tmp_path):
    """`samples.jsonl` -> any file: a resume refuses before loading anything, and an append never follows a
    link planted mid-run; the file it points to is untouched."""
    from cactus_bench.app.store import _append_line

    cfg = cfg_of(*TINY, "method=sps", "limit=2", results=tmp_path / "runs", pair_dir=small_pair_dir)
    run_mod.run(cfg)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    samples = run_dir(cfg) / "samples.jsonl"
    kept = samples.read_text()
    samples.unlink()
    samples.symlink_to(victim)
    with pytest.raises(StoreError, match="samples.jsonl is a symbolic link .* nothing was written"):
        run_mod.run(cfg_of(*TINY, "method=sps", "limit=3", results=tmp_path / "runs", pair_dir=small_pair_dir))
    with pytest.raises(StoreError, match="is a symbolic link"):
        _append_line(samples, {"index": 9})
    assert victim.read_text() == "precious\n"
    samples.unlink()
    samples.write_text(kept)
    assert run_mod.run(cfg)["samples"] == 2

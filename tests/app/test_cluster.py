"""The cluster tier (`make test-cluster`): a real one-node SLURM cluster (.ci/slurm/start) runs sweeps through
the launcher users run (`hydra/launcher=slurm`): summaries equal to a local sweep, a requeued job resuming
its shard, a cancelled shard named and re-submitted alone, SIGTERM with a grace period leaving whole lines
and no lock. The small trained pair keeps each job to seconds."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cactus_bench.app.store import read_samples_file

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
# CPU-only node with 2 cores: each job asks one core and no GPU
CPU_JOBS = [
    "hydra/launcher=slurm",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=20",
]
COMPARED = ("samples", "score", "accepted_length", "tau", "acceptance_rate", "target_kl", "output_kl", "new_tokens")


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """The tier needs a running cluster (`make test-cluster` starts one): without it, fail, never skip."""
    if shutil.which("sinfo") is None or not os.environ.get("SLURM_CONF"):
        pytest.fail("no SLURM cluster: run `make test-cluster` (it starts one with .ci/slurm/start)")
    state = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True).stdout.split()
    assert state and all(s in ("idle", "mix", "alloc") for s in state), f"node state: {state}"


def spec_file(tmp_path, limit, rows=("ar", "sps")) -> Path:
    """A two-row sweep on GSM8K (long prompts: each job lasts long enough to act on)."""
    spec = {
        "name": "cl",
        "title": "cluster tier",
        "pair": "tiny",
        "m": 2,
        "seed": 0,
        "limit": limit,
        "max_gen_toks": 24,
        "data": ["gsm8k"],
        "rows": [{"label": r, "method": r} for r in rows],
        "columns": ["score", "accepted_length"],
    }
    path = tmp_path / "cl.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def env_for(results: Path) -> dict:
    return {**os.environ, "CACTUS_BENCH_RESULTS": str(results), "PYTHONUNBUFFERED": "1"}


def sweep(spec: Path, results: Path, pair_dir, *args, background=False, env=None):
    from ..helpers.configs import pair_overrides

    cmd = [
        sys.executable,
        "-m",
        "cactus_bench.tools.sweep",
        str(spec),
        *args,
        *pair_overrides(pair_dir),
        "progress=false",
    ]
    env = {**env_for(results), **(env or {})}
    kw = dict(cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if background:
        return subprocess.Popen(cmd, **kw)
    return subprocess.run(cmd, timeout=480, **kw)


def summaries(results: Path) -> dict:
    out = {}
    for path in results.glob("runs/*/*/*/summary.json"):
        s = json.loads(path.read_text())
        out[path.parent.name] = {k: s.get(k) for k in COMPARED}
    return out


def shard_files(results: Path, pattern: str) -> list[Path]:
    return sorted(results.glob(f"runs/gsm8k/small/{pattern}"))


def wait_for(predicate, timeout=240, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def running_job(manifest: Path) -> str:
    """The SLURM job (array task) that last opened this shard."""
    return json.loads(manifest.read_text())["history"][-1]["slurm_job"]


def squeue_state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-o", "%i %T"], capture_output=True, text=True).stdout
    return dict(line.split() for line in out.splitlines()).get(job, "gone")


HOLD = ROOT / "tests" / "helpers" / "hold"  # its sitecustomize holds a run mid-shard


def sweep_mid_shard(tmp_path, pair_dir, shard: int, samples_written: int):
    """A 40-item, two-shard sweep of the verifier alone in the background whose runs stop before their
    sample after `samples_written` until `release()` (so what the test does next meets a shard mid-run
    however fast this machine is), caught there: (the spec, the sweep's process, the shard's samples file,
    its SLURM job, release)."""
    spec = spec_file(tmp_path, limit=40, rows=("ar",))
    gate = tmp_path / "release"
    held = {"CACTUS_TEST_HOLD_AFTER": str(samples_written), "CACTUS_TEST_HOLD_RELEASE": str(gate)}
    held["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOLD), os.environ.get("PYTHONPATH")]))
    proc = sweep(spec, tmp_path, pair_dir, "shards=2", *CPU_JOBS, background=True, env=held)
    pattern = f"ar_*/samples.shard-{shard}-of-2.jsonl"
    samples = wait_for(lambda: next(iter(shard_files(tmp_path, pattern)), None), what="a shard")
    wait_for(lambda: len(read_samples_file(samples)) >= samples_written, what=f"{samples_written} samples")
    job = running_job(samples.with_name(f"manifest.shard-{shard}-of-2.json"))
    return spec, proc, samples, job, gate.touch


def test_a_sharded_sweep_on_slurm_equals_the_same_sweep_run_locally(small_pair_dir, tmp_path):
    spec = spec_file(tmp_path, limit=6)
    local = sweep(spec, tmp_path / "local", small_pair_dir)
    assert local.returncode == 0, local.stdout[-3000:]
    done = sweep(spec, tmp_path / "slurm", small_pair_dir, "shards=2", *CPU_JOBS)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "sacct" not in done.stdout.replace("SLURM accounting (sacct) is off", "")  # no warning storm
    assert summaries(tmp_path / "slurm") == summaries(tmp_path / "local") and len(summaries(tmp_path / "local")) == 2
    manifests = list((tmp_path / "slurm").glob("runs/*/*/*/manifest.shard-*.json"))
    jobs = {json.loads(m.read_text())["history"][-1]["slurm_job"] for m in manifests}
    assert len(manifests) == 4 and len({j.split("_")[0] for j in jobs}) == 1 and len(jobs) == 4  # one array
    logs = list((tmp_path / "slurm").glob("multirun/*/jobs/logs/*/*_log.err"))
    assert len(logs) == 4  # per-job logs under the results folder
    again = sweep(spec, tmp_path / "slurm", small_pair_dir, "shards=2", *CPU_JOBS)
    assert again.returncode == 0 and "4 shard(s) already finished: not submitted" in again.stdout


def test_a_requeued_job_resumes_its_shard_with_nothing_lost_or_repeated(small_pair_dir, tmp_path):
    _, proc, samples, job, release = sweep_mid_shard(tmp_path, small_pair_dir, shard=0, samples_written=3)
    subprocess.run(["scontrol", "requeue", job], check=True)
    wait_for(lambda: squeue_state(job) == "PENDING", what="the job pending again")
    release()  # the requeued job and the other shard may now decode past the hold
    # SLURM holds a requeued job ~2 minutes before it may start; a test need not wait for that
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
    out, _ = proc.communicate(timeout=480)
    assert proc.returncode == 0, out[-3000:]
    rows = read_samples_file(samples)
    indices = [r["index"] for r in rows]
    assert sorted(indices) == sorted(set(indices)) and len(indices) == 20  # every item once
    history = json.loads(samples.with_name("manifest.shard-0-of-2.json").read_text())["history"]
    assert len(history) == 2 and history[0]["status"] == "interrupted" and history[1]["status"] == "complete"
    assert history[0]["host"] == history[1]["host"] and history[0]["pid"] != history[1]["pid"]
    assert history[0]["slurm_job"] == history[1]["slurm_job"] == job  # the same job, run again
    assert json.loads(samples.with_name("summary.json").read_text())["samples"] == 40


def test_a_cancelled_shard_is_named_and_resubmitted_alone(small_pair_dir, tmp_path):
    spec, proc, samples, job, release = sweep_mid_shard(tmp_path, small_pair_dir, shard=1, samples_written=2)
    subprocess.run(["scancel", job], check=True)
    wait_for(lambda: squeue_state(job) in ("gone", "CANCELLED"), what="the job cancelled")
    release()  # the other shard may now finish
    out, _ = proc.communicate(timeout=480)
    assert proc.returncode == 2, out[-3000:]
    said = " ".join(out.split())  # the paragraph, unwrapped
    assert re.search(
        rf"1 of 2 SLURM job\(s\) ended without finishing: job {job} \(\+run=cl_0-1of2\): CANCELLED", said
    ), out
    assert "run the same sweep command again" in out
    folder = samples.parent
    assert not (folder / "summary.json").exists()
    assert f"Not finished: ar on gsm8k (tiny): shard 1/2 ({folder})" in said
    log = next(tmp_path.glob(f"multirun/*/jobs/logs/{job.split('_')[0]}_0/*_log.out"))  # the other shard's merge
    assert re.search(r"is incomplete: \d+ of 40 items missing \(shard=1/2\)", log.read_text())
    again = sweep(spec, tmp_path, small_pair_dir, "shards=2", *CPU_JOBS)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "1 shard(s) already finished: not submitted" in again.stdout and "+run=cl_0-1of2 " in again.stdout + " "
    assert json.loads((folder / "summary.json").read_text())["samples"] == 40


def test_sigterm_with_a_grace_period_leaves_whole_lines_and_no_lock(small_pair_dir, tmp_path):
    """What pre-emption sends (`scancel --signal=TERM`): the run stops between samples, every stored line is
    whole, the shard's lock is gone and its manifest says interrupted; the same sweep finishes it."""
    spec, proc, samples, job, release = sweep_mid_shard(tmp_path, small_pair_dir, shard=0, samples_written=2)
    manifest = samples.with_name("manifest.shard-0-of-2.json")
    subprocess.run(["scancel", "--signal=TERM", job], check=True)  # to the job step: the run itself
    wait_for(lambda: json.loads(manifest.read_text())["status"] == "interrupted", what="the shard interrupted")
    release()  # the other shard may now finish
    out, _ = proc.communicate(timeout=480)
    assert proc.returncode == 2 and f"job {job} (+run=cl_0-0of2)" in out, out[-3000:]
    text = samples.read_text()
    assert text.endswith("\n") and all(json.loads(line)["index"] >= 0 for line in text.splitlines())
    assert not samples.with_name(".lock.shard-0-of-2").exists()
    assert json.loads(manifest.read_text())["status"] == "interrupted"
    assert "interrupted (SIGTERM)" in next(tmp_path.glob(f"multirun/*/jobs/logs/{job}/*_log.err")).read_text()
    again = sweep(spec, tmp_path, small_pair_dir, "shards=2", *CPU_JOBS)
    assert again.returncode == 0 and json.loads(samples.with_name("summary.json").read_text())["samples"] == 40


def test_slots_per_gpu_packs_runs_into_one_job(small_pair_dir, tmp_path):
    """slots_per_gpu=2: the two shards run as two tasks of one job (sharing its GPU), summing to what a
    local sweep computes."""
    spec = spec_file(tmp_path, limit=6, rows=("sps",))
    local = sweep(spec, tmp_path / "local", small_pair_dir)
    done = sweep(spec, tmp_path / "slurm", small_pair_dir, "shards=2", "slots_per_gpu=2", *CPU_JOBS)
    assert local.returncode == 0 and done.returncode == 0, done.stdout[-3000:]
    assert "+pack=pack_0 hydra.launcher.tasks_per_node=2" in done.stdout
    manifests = sorted((tmp_path / "slurm").glob("runs/*/*/*/manifest.shard-*.json"))
    jobs = [json.loads(m.read_text())["history"][-1]["slurm_job"] for m in manifests]
    assert len(manifests) == 2 and jobs[0] == jobs[1]
    assert summaries(tmp_path / "slurm") == summaries(tmp_path / "local")

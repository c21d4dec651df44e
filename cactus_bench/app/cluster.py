"""SLURM through Hydra's submitit launcher, as clusters users have run it (`hydra/launcher=slurm`).

* One job array per sweep: every run (cell x shard) is a task of it; `array_parallelism` caps how many run at
  once (set it to the cluster's job limit). Each task's logs are under the sweep's folder (`logs/<job>_<task>`).
* Accounting off (no `sacct`, common on small clusters): submitit polls `sacct` and prints a warning block on
  every poll; here the launcher notices once, says so in one line, and reads job states from `squeue` (which
  keeps finished jobs for MinJobAge), so a cancelled job is seen as ended instead of waited on forever.
* Every job is waited for; those that ended without finishing are named together (cell, shard, state, log)
  with what to do: the same sweep command submits only the shards that are not finished.
* Several runs per GPU (`slots_per_gpu=k`): the sweep packs k runs into one job of k tasks sharing its GPU
  (`pack_entry` picks a task's run by its rank).
* On one machine (`hydra/launcher=local_gpus`), each worker claims a GPU slot of its own (`claim_gpu_slot`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

log = logging.getLogger("cactus_bench")


class JobsUnfinished(RuntimeError):
    """Some jobs of a sweep ended without finishing: the message names them and what to do."""


def accounting_works() -> bool:
    if shutil.which("sacct") is None:
        return False
    done = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True)
    return done.returncode == 0


def _squeue_watcher():
    """submitit's watcher reading `squeue` instead of `sacct`; a job squeue no longer lists has ended."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class SqueueWatcher(SlurmInfoWatcher):
        reads_squeue = True  # installed once per process

        def _make_command(self):
            return ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%N", "-u", os.environ.get("USER", "root")]

        def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
            text = string.decode() if isinstance(string, bytes) else string
            info = {}
            for line in text.splitlines():
                job, state, nodes = (line.split("|") + ["", ""])[:3]
                info[job] = {"JobID": job, "State": state, "NodeList": nodes}
            for job in self._registered - set(info):  # gone from squeue: ended (submitit reads its result)
                info[job] = {"JobID": job, "State": "ENDED", "NodeList": ""}
            return info

    return SqueueWatcher(delay_s=60)


def quiet_accounting() -> None:
    """Without accounting, job states come from squeue (one line said) instead of a warning per poll."""
    from submitit.slurm import slurm

    if accounting_works() or getattr(slurm.SlurmJob.watcher, "reads_squeue", False):
        return
    log.info("SLURM accounting (sacct) is off on this cluster: job states are read from squeue")
    slurm.SlurmJob.watcher = _squeue_watcher()


class SlurmUnavailable(RuntimeError):
    """hydra/launcher=slurm on a machine without SLURM's commands: the message says what to do."""


def require_slurm() -> None:
    """SLURM's commands are here and its controller answers, before anything is composed, decoded or
    submitted."""
    missing = [c for c in ("sbatch", "squeue", "sacct", "sinfo") if shutil.which(c) is None]
    if missing:
        raise SlurmUnavailable(
            f"hydra/launcher=slurm submits every run as a SLURM job, but this machine has no {', '.join(missing)} "
            "on its PATH. Run the sweep on the cluster's login node, or leave hydra/launcher=slurm out to run the "
            "cells here one after another (hydra/launcher=local_gpus: on this machine's GPUs). Nothing was submitted."
        )
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=60)
        said = done.stderr if done.returncode else None
    except subprocess.TimeoutExpired:
        said = "no answer in 60 s"
    if said is not None:  # the client alone (a laptop, a login node whose controller is down)
        raise SlurmUnavailable(
            f"SLURM's commands are here but its controller does not answer (sinfo: {last_line(RuntimeError(said))}). "
            "Run the sweep where `sinfo` lists the cluster's nodes, or leave hydra/launcher=slurm out to run the "
            "cells here. Nothing was submitted."
        )


def launch_array(launcher, job_overrides, initial_job_idx: int) -> list:
    """What `hydra_plugins.cactus_bench_launcher.SlurmLauncher.launch` does: submit the runs as one job array
    (submitit, with the launcher's parameters), wait for every job, and name together those that ended without
    finishing. SLURM missing or refusing the array is one paragraph (Hydra would print a traceback around it)."""
    from cactus_bench.app.errors import fail

    try:
        require_slurm()
    except SlurmUnavailable as e:
        fail(e)
    import submitit
    from hydra.core.singleton import Singleton
    from hydra.core.utils import filter_overrides
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    quiet_accounting()
    params = dict(launcher.params)
    folder = params.pop("submitit_folder")
    executor = submitit.AutoExecutor(
        folder=folder, cluster="slurm", slurm_max_num_timeout=params.pop("max_num_timeout")
    )
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items() if v is not None})
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    calls = [
        (list(o), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}", Singleton.get_state())
        for i, o in enumerate(job_overrides)
    ]
    try:
        jobs = executor.map_array(launcher, *zip(*calls))
    except Exception as e:  # noqa: BLE001  (sbatch refused: no controller reachable, a bad partition or account)
        fail(
            SlurmUnavailable(
                f"sbatch refused the sweep's job array ({last_line(e)}). Run it where SLURM answers (`sinfo` lists "
                "the cluster's nodes) and check the launcher's settings (hydra.launcher.partition, account, ...); "
                "without a cluster, leave hydra/launcher=slurm out. Nothing was submitted."
            )
        )
    array = jobs[0].job_id.split("_")[0]
    log.info(
        "submitted %d run(s) as SLURM job array %s; logs: %s", len(jobs), array, folder.replace("%j", f"{array}_*")
    )
    results, failed = [], []
    for job, overrides in zip(jobs, job_overrides):
        try:
            results.append(job.results()[0])
        except Exception as e:  # noqa: BLE001  (ended without a result: cancelled, killed, failed)
            state = job.state if job.state not in ("UNKNOWN", "ENDED") else "ended"
            failed.append(f"job {job.job_id} ({which_run(filter_overrides(overrides))}): {state}, {last_line(e)}; "
                          f"log {job.paths.stderr}")  # fmt: skip
    if failed:  # one paragraph and exit 2 (raised, Hydra would print its traceback around it)
        fail(
            JobsUnfinished(
                f"{len(failed)} of {len(jobs)} SLURM job(s) ended without finishing: " + "; ".join(failed) + ". "
                "Finished items are kept: run the same sweep command again, and only the shards that are not "
                "finished are submitted (each resumes where it stopped)."
            )
        )
    return results


def which_run(overrides: list[str]) -> str:
    """The overrides that tell a sweep's jobs apart (its run, pack or shard), else all of them."""
    own = [o for o in overrides if o.startswith(("+run=", "+pack=", "shard="))]
    return " ".join(own or overrides)


def last_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return lines[-1][:200] if lines else type(e).__name__


def pack_entry(pack: list[Any]) -> Any:
    """This task's run of a packed job: the task's rank (SLURM_PROCID) picks it."""
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    if rank >= len(pack):
        raise ValueError(f"task {rank} of a job packing {len(pack)} run(s): tasks_per_node must equal the pack")
    return pack[rank]


_GPU_SLOT = None  # the lock file this worker holds for its GPU (kept open while the process lives)


def claim_gpu_slot(results: str | os.PathLike) -> None:
    """Under `hydra/launcher=local_gpus`, give this worker process one GPU of its own (`take_slot`), its
    slots' lock files under the results folder's `.gpu-slots/` (this sweep's, not every user's /tmp). Must
    run before torch initialises CUDA."""
    global _GPU_SLOT
    from hydra.core.hydra_config import HydraConfig

    if _GPU_SLOT is not None or not HydraConfig.initialized():
        return
    if HydraConfig.get().runtime.choices.get("hydra/launcher") != "local_gpus":
        return
    gpus = int(os.environ.get("CACTUS_BENCH_GPUS", "1"))
    slots = gpus * int(os.environ.get("CACTUS_BENCH_SLOTS_PER_GPU", "1"))  # k slots per GPU
    slot, _GPU_SLOT = take_slot(Path(results) / ".gpu-slots", slots)
    os.environ["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
    log.info("this job uses GPU %d (CUDA_VISIBLE_DEVICES)", slot % gpus)


def take_slot(folder: Path, slots: int, poll_s: float = 5.0):
    """The first of `slots` whose lock file in `folder` no other process holds: (its number, the open file
    that holds it while this process lives). While every slot is held, it says so (once a minute) and waits."""
    import fcntl
    import time

    folder.mkdir(parents=True, exist_ok=True)
    said = None
    while True:
        for slot in range(slots):
            f = open(folder / f"gpu-{slot}.lock", "a")  # noqa: SIM115  (held while the process lives)
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            return slot, f
        if said is None or time.monotonic() - said > 60:
            log.warning("all %d GPU slot(s) of %s are held by other workers: waiting for one to finish", slots, folder)
            said = time.monotonic()
        time.sleep(poll_s)

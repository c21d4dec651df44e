"""`python -m cactus_bench [overrides]` — one run (or a Hydra multirun with -m). `--help` lists the settings."""

import logging
import os
import sys

HELP = """\
python -m cactus_bench [KEY=VALUE ...]      one run: a drafter/verifier pair decodes a benchmark with one
                                            acceptance rule; logs AL, Rej, the task score and the speedup
python -m cactus_bench -m KEY=A,B ...       a sweep (Hydra multirun; hydra/launcher=slurm for a cluster)

Config groups (conf/<group>/<option>.yaml), chosen as GROUP=OPTION:
  pair      qwen3_0.6b_8b (default) qwen3_0.6b_14b qwen3_1.7b_32b r1distill_1.5b_7b gemma2_2b_9b
            llama3_1b_8b tiny (embedded, offline); any model: pair.drafter=ID_OR_PATH pair.verifier=...
  method    cactus (default) cactus_exact sps tas topk interp mentored speccas ar (the verifier alone)
  data      gsm8k (default) ifeval gpqa specbench arith (embedded task)
  sampling  paper (T=0.6, top-p 0.95, top-k 20; default) greedy plain
  engine    eager (default) static fast        tracking  none (default) wandb

Top-level keys:
  delta=1.0          Cactus's divergence budget        m=10            draft length
  seed=0             run seed (per-item streams)       limit=null      first N items
  max_gen_toks       token budget (4096; 128 for pair=tiny)
  shard=i/n          decode only shard i of n           results_dir     where runs are stored
Nested keys: sampling.temperature, method.params.<name>, pair.device, data.subset, tracking.mode, ...

Examples:
  python -m cactus_bench method=cactus delta=0.75 data=gpqa
  python -m cactus_bench pair=tiny method=cactus delta=0.75 data=gsm8k limit=3
  python -m cactus_bench -m method=sps,cactus delta=0.75,1.0 hydra/launcher=slurm

Errors are one paragraph; --debug (or CACTUS_BENCH_DEBUG=1) shows the traceback too.
Docs: README.md; the protocol behind the paper's numbers: docs/protocol.md."""


def _debug() -> bool:
    return os.environ.get("CACTUS_BENCH_DEBUG", "") not in ("", "0")


def main() -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):  # before any heavy import
        print(HELP)
        return
    if "--debug" in sys.argv:
        sys.argv.remove("--debug")
        os.environ["CACTUS_BENCH_DEBUG"] = "1"
    import hydra

    from .app import config  # noqa: F401  (registers the config schema; torch, not transformers or lm-eval)

    hydra.main(version_base="1.3", config_path="conf", config_name="config")(_run)()


_GPU_SLOT = None  # the lock file this worker holds for its GPU (kept open while the process lives)


def _claim_gpu_slot() -> None:
    """Under `hydra/launcher=local_gpus`, give this worker process one GPU of its own: the first slot whose
    lock file no other worker holds. Must run before torch initialises CUDA."""
    global _GPU_SLOT
    from hydra.core.hydra_config import HydraConfig

    if _GPU_SLOT is not None or not HydraConfig.initialized():
        return
    if HydraConfig.get().runtime.choices.get("hydra/launcher") != "local_gpus":
        return
    import fcntl
    import tempfile

    for slot in range(int(os.environ.get("CACTUS_BENCH_GPUS", "1"))):
        f = open(os.path.join(tempfile.gettempdir(), f"cactus-bench-gpu-{slot}.lock"), "a")  # noqa: SIM115
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        _GPU_SLOT = f
        os.environ["CUDA_VISIBLE_DEVICES"] = str(slot)
        logging.getLogger("cactus_bench").info("this job uses GPU %d (CUDA_VISIBLE_DEVICES)", slot)
        return


def _run(cfg) -> None:
    from .app.config import ConfigError, validate
    from .app.errors import fail

    logging.getLogger("cactus_bench").setLevel(logging.INFO)
    _claim_gpu_slot()
    try:
        validate(cfg)  # before torch's heavier company (transformers, lm-eval) is imported
        from .app.run import run

        summary = run(cfg)
    except ConfigError as e:
        fail(e)
    except Exception as e:  # noqa: BLE001  (every failure becomes one paragraph; --debug adds the traceback)
        fail(e)
    from .metrics import METRICS

    keys = ["samples"] + [
        k for m in METRICS.values() if m.cli for k in (m.name, f"{m.name}_stderr") if k in summary or k == m.name
    ]
    print(
        "  ".join(
            f"{k}={summary[k]:.4g}" if isinstance(summary.get(k), float) else f"{k}={summary.get(k)}" for k in keys
        )
    )


if __name__ == "__main__":
    main()

"""`python -m cactus_bench [overrides]` — one run (or a Hydra multirun with -m). `--help` lists the settings."""

import logging
import os
import sys


def main() -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):  # before any heavy import
        from cactus_bench.app.schema import help_text

        print(help_text())
        return
    if "--debug" in sys.argv:
        sys.argv.remove("--debug")
        os.environ["CACTUS_BENCH_DEBUG"] = "1"
    from cactus_bench.app.offline import go_offline_without_network

    go_offline_without_network()  # before the hub's libraries read the switch
    import hydra

    from cactus_bench.app.schema import CONF_DIR  # registers the config schema too

    overrides, multirun = overrides_of(sys.argv[1:]), bool({"-m", "--multirun"} & set(sys.argv[1:]))
    check_composition(overrides, multirun)
    if multirun and "hydra/launcher=slurm" in overrides:  # before Hydra writes the sweep's multirun.yaml
        from cactus_bench.app.cluster import SlurmUnavailable, require_slurm
        from cactus_bench.app.errors import fail

        try:
            require_slurm()
        except SlurmUnavailable as e:
            fail(e)

    hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")(_run)()


# Hydra's flags that take a value as the next word (`--cfg job`, `-c job`; `--cfg=job` is one word)
VALUE_FLAGS = {
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--info",
    "-i",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
}
INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}  # --info's optional value


def overrides_of(argv: list[str]) -> list[str]:
    """The overrides on a command line: every word but Hydra's flags and their values."""
    out, skip = [], False
    for i, word in enumerate(argv):
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            skip = word in VALUE_FLAGS and "=" not in word and (word not in ("--info", "-i") or nxt in INFO_TOPICS)
            continue
        out.append(word)
    return out


def check_composition(overrides: list[str], multirun: bool) -> None:
    """Compose the config once before Hydra does, so an override Hydra refuses (an unknown key or option, a
    value of the wrong type) is one paragraph with exit status 2, not Hydra's text and exit 1. A multirun's
    sweep values (a,b) are checked value by value."""
    from cactus_bench.app.compose import compose
    from cactus_bench.app.errors import explain_composition, fail

    sets = [[]]
    for o in overrides:
        key, _, value = o.partition("=")
        values = value.split(",") if multirun and "," in value and not value.startswith(("[", "{")) else [value]
        sets = [s + [f"{key}={v}"] for s in sets for v in values][:64]  # enough to reach every bad value
    for chosen in sets:
        try:
            compose(tuple(o for o in chosen if not o.startswith(("hydra/", "hydra."))))
        except Exception as e:  # noqa: BLE001  (only Hydra's composition errors are rewritten)
            explained = explain_composition(e, chosen)
            if explained is None:
                raise
            fail(explained)


def _run(cfg) -> None:
    from cactus_bench.app.cluster import claim_gpu_slot
    from cactus_bench.app.config import ConfigError, validate
    from cactus_bench.app.errors import fail

    logging.getLogger("cactus_bench").setLevel(logging.INFO)
    claim_gpu_slot(cfg.paths.results)
    try:
        if cfg.get("pack"):  # a SLURM job packing several runs (slots_per_gpu): this task's run
            from hydra.core.global_hydra import GlobalHydra
            from omegaconf import OmegaConf

            from cactus_bench.app.cluster import pack_entry
            from cactus_bench.app.compose import compose

            entry = pack_entry(OmegaConf.to_container(cfg.pack))
            GlobalHydra.instance().clear()  # the job's own config is done with: the run composes its own
            cfg = compose(tuple(entry))
        spec = validate(cfg)  # before torch's heavier company (transformers, lm-eval) is imported
        from cactus_bench.app.run import run

        summary = run(spec)
    except ConfigError as e:
        fail(e)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (app.run.Terminated): one line, not a traceback
        signal = "SIGTERM" if type(e).__name__ == "Terminated" else "Ctrl-C"
        print(f"interrupted ({signal}): the run is marked interrupted; the same command resumes it", file=sys.stderr)
        sys.exit(143 if signal == "SIGTERM" else 130)
    except Exception as e:  # noqa: BLE001  (every failure becomes one paragraph; --debug adds the traceback)
        fail(e)
    from cactus_bench.core.metrics import METRICS

    keys = ["samples"] + [
        k for m in METRICS.values() if m.cli for k in (m.name, f"{m.name}_stderr") if k in summary or k == m.name
    ]
    print(
        "  ".join(
            f"{k}={summary[k]:.4g}" if isinstance(summary.get(k), float) else f"{k}={summary.get(k)}" for k in keys
        )
    )
    for m in METRICS.values():  # a timed figure's caveat, as the tables and figures print it
        if summary.get(f"{m.name}_caveat"):
            print(f"⚠ {summary[f'{m.name}_caveat']}")


if __name__ == "__main__":
    main()

"""Composing run configs the way the CLI does, optionally on a local pair and into a results folder."""

from hydra import compose, initialize_config_dir

from cactus_bench.app.config import CONF_DIR


def pair_overrides(pair_dir) -> list[str]:
    return [f"pair.drafter={pair_dir / 'drafter'}", f"pair.verifier={pair_dir / 'verifier'}"]


def cfg_of(*overrides, results=None, pair_dir=None):
    extra = pair_overrides(pair_dir) if pair_dir is not None else []
    if results is not None:
        extra.append(f"results_dir={results}")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=[*overrides, *extra])

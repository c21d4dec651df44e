"""Composing a run's config from overrides, as `python -m cactus_bench` does (the sweep, the reports,
`plan` and lm-eval's adapter compose cells and model_args through it)."""

from __future__ import annotations

from functools import lru_cache

from omegaconf import DictConfig, OmegaConf

from cactus_bench.app import method_configs  # noqa: F401  (stores the method group Hydra composes from)
from cactus_bench.app.schema import CONF_DIR


def compose(overrides: tuple[str, ...]) -> DictConfig:
    """The run config Hydra composes from these overrides (composition is pure: cached; callers get a copy)."""
    return OmegaConf.create(_compose(tuple(overrides)))


@lru_cache(maxsize=512)
def _compose(overrides: tuple[str, ...]) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=False)

"""Composing and validating a run's config: every option, the paper's defaults, the README's commands,
sweeps and launchers, bad values."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from cactus_bench.app import method_configs  # noqa: F401  (the method group Hydra composes)
from cactus_bench.app import run as run_mod
from cactus_bench.app.config import ConfigError, validate
from cactus_bench.core.methods import method_names
from cactus_bench.tools.report import load_spec

from ..helpers.configs import cfg_of
from ..helpers.guards import refuse

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"


GROUPS = {
    g: sorted(p.stem for p in (CONF / g).glob("*.yaml")) for g in ("pair", "data", "sampling", "tracking", "engine")
} | {"method": method_names()}  # the method group is generated from the rules (app/method_configs.py)


@pytest.mark.parametrize("group,option", [(g, o) for g, opts in GROUPS.items() for o in opts])
def test_every_config_option_composes_and_validates(group, option):
    cfg = cfg_of(f"{group}={option}")
    if (group, option) == ("engine", "vllm") and importlib.util.find_spec("vllm") is None:
        with pytest.raises(ConfigError, match="engine.backend=vllm needs vLLM"):  # without it: how to install it
            validate(cfg)
        return
    validate(cfg)


def test_defaults_follow_the_paper():
    cfg = cfg_of()
    assert (cfg.m, cfg.delta, cfg.pair.drafter, cfg.pair.verifier) == (10, 1.0, "Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B")
    assert (cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.top_k) == (0.6, 0.95, 20)
    assert cfg.method.name == "cactus" and cfg.method.params.delta == 1.0


def test_readme_commands_compose():
    cfg = cfg_of("method=cactus", "delta=0.75", "data=gpqa")
    assert cfg.method.params.delta == 0.75 and cfg.data.name == "gpqa" and validate(cfg).method.rule.delta == 0.75
    cfg = cfg_of("pair=tiny", "method=cactus", "delta=0.75", "data=gsm8k", "limit=3")
    assert cfg.pair.drafter == "embedded:tiny/drafter" and cfg.limit == 3


def test_readmes_index_names_every_page_in_docs_and_only_those():
    """README is one screen; the rest lives in docs/, and the index in README is how a reader finds it."""

    named = set(re.findall(r"`(docs/[\w.-]+\.md)`", (ROOT / "README.md").read_text()))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert named == pages, (named - pages, pages - named)
    assert len((ROOT / "README.md").read_text().splitlines()) <= 60


def test_validate_resolves_the_run_once():
    """One object out of validation: the method, the identity, the decode and model specs, and what
    `dtype: auto` means on this CPU; the verifier alone names no drafter and no drafter precision."""
    from cactus_bench.app.identity import RunIdentity

    cfg = cfg_of("pair=tiny", "method=cactus", "delta=0.5", "m=3", "pair.drafter_dtype=bfloat16")
    spec = validate(cfg)
    assert spec.identity == RunIdentity.of(cfg) and spec.method.rule.delta == 0.5 and spec.decode.method == spec.method
    assert spec.precision == {"verifier_dtype": "float32", "drafter_dtype": "bfloat16"}
    assert (spec.models.drafter, spec.decode.max_new_tokens, spec.decode.top_k) == (
        cfg.pair.drafter,
        cfg.max_gen_toks,
        cfg.sampling.top_k,
    )
    alone = validate(cfg_of("pair=tiny", "method=ar"))
    assert alone.models.drafter is None and alone.precision == {"verifier_dtype": "float32"}
    assert alone.loading(str.upper).verifier == cfg.pair.verifier.upper()


@pytest.mark.parametrize(
    "spec_path", sorted(p for p in (ROOT / "sweeps").glob("*.yaml") if p.stem != "wandb_delta"), ids=lambda p: p.stem
)
def test_every_sweep_spec_composes_into_valid_runs(spec_path):
    from cactus_bench.tools.report import run_overrides

    spec = load_spec(spec_path)
    assert spec["rows"] and spec["data"] and spec["columns"]
    for data in spec["data"]:
        for row in spec["rows"]:
            cfg = cfg_of(*run_overrides(spec, row, data))
            method = validate(cfg).method
            assert method.name == row["method"] and cfg.m == spec["m"]
            if "delta" in row:
                assert method.rule.delta == row["delta"]


@pytest.mark.parametrize("launcher,target", [("slurm", "SlurmLauncher"), ("local_parallel", "JoblibLauncher")])
def test_cluster_launchers_compose(launcher, target):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith(target)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["delta=-1"], "delta=-1.0 is not valid: the divergence budget must be >= 0"),
        (["m=0"], "m=0 is not valid"),
        (["limit=0"], "limit=0 is not valid"),
        (["sampling.top_p=2"], "sampling.top_p=2.0 is not valid"),
        (["method=topk", "method.params.k=0"], "k must be an integer >= 1"),
        (["method=tas", "method.params.recovery=mode"], "recovery must be one of"),
    ],
)
def test_bad_values_fail_before_any_model_loads(overrides, match, monkeypatch):
    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded a model for a bad config"))
    with pytest.raises(ConfigError, match=match):
        run_mod.run(cfg_of(*overrides))


def test_unknown_group_option_and_bad_type_are_hydra_errors():
    with pytest.raises(ConfigCompositionException, match="method/nope"):
        cfg_of("method=nope")
    with pytest.raises((ConfigCompositionException, ValidationError), match="abc"):
        cfg_of("m=abc")


def test_cli_reports_a_bad_value_clearly():
    out = subprocess.run([sys.executable, "-m", "cactus_bench", "delta=-0.5"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "delta=-0.5 is not valid" in out.stderr

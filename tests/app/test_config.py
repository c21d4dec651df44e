"""A run's configuration (app/config.py, app/schema.py, the CLI's composition): every bad value, key,
device, login or missing file is one paragraph naming the key, before anything heavy loads or imports."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cactus_bench.adapters.benchmarks.data import DataError
from cactus_bench.app import run as run_mod
from cactus_bench.app.config import ConfigError, validate

from ..helpers.cli import cli, one_paragraph, run_main
from ..helpers.configs import cfg_of
from ..helpers.guards import refuse

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["delta=inf"], "delta=inf is not valid: a finite number"),
        (["sampling.temperature=nan"], "sampling.temperature=nan is not valid"),
        (["m=1000", "max_gen_toks=48"], r"m=1000 is not valid.*max_gen_toks=48"),
        (["+temperature=-1"], "temperature is not a setting of a run. It lives at sampling.temperature"),
        (["+detla=0.5"], "Did you mean delta"),
        (["shard=2/2"], "shard='2/2' is not valid"),
        (["pair.dtype=foo"], "pair.dtype='foo' is not valid"),
        (["pair.device=gpu0"], "pair.device='gpu0' is not valid"),
        (["pair.name=../../../../x"], r"pair.name='../../../../x' is not valid: it becomes a folder .* no '..'"),
        (["pair.name=/tmp/elsewhere"], "pair.name='/tmp/elsewhere' is not valid: it becomes a folder"),
        (["data.label=../../y"], "data.label='../../y' is not valid: it becomes a folder"),
    ],
)
def test_bad_values_are_refused_before_anything_loads(overrides, match):
    with pytest.raises(ConfigError, match=match):
        validate(cfg_of(*overrides))


def test_a_gpu_device_without_a_gpu_is_refused():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        validate(cfg_of("pair.device=cuda"))


def test_wandb_without_a_login_is_refused_and_offline_is_fine(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(ConfigError, match="wandb login"):
        validate(cfg_of("tracking=wandb"))
    validate(cfg_of("tracking=wandb", "tracking.mode=offline"))


def test_unused_settings_are_ignored_with_one_line(caplog):
    with caplog.at_level("INFO", logger="cactus_bench"):
        validate(cfg_of("method=sps", "delta=0.75"))
        validate(cfg_of("method=ar", "m=0"))  # m means nothing to the verifier alone: accepted, noted
    notes = [r.getMessage() for r in caplog.records]
    assert "note: delta=0.75 is not used by method=sps (ignored)" in notes
    assert "note: m=0 is not used by method=ar (ignored)" in notes


def test_help_is_fast_and_lists_the_settings():
    """`--help` answers before anything heavy loads: what it imports is read from the interpreter's own import
    log (a wall-clock bound would judge the machine's load, not the code)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cactus_bench", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "hydra" in imported  # the import log was read
    assert not imported & {"torch", "transformers", "lm_eval", "datasets", "pandas", "matplotlib"}, sorted(imported)
    for word in ("pair", "method", "data", "sampling", "delta=", "m=", "shard=", "Examples"):
        assert word in out.stdout


def test_validation_errors_come_before_the_heavy_imports(tmp_path):
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('HEAVY', sorted(m for m in ('lm_eval', 'transformers', 'datasets') "
        "if m in sys.modules), file=sys.stderr))\n"
        "sys.argv = ['cactus_bench', 'delta=-1']\n"
        "import runpy\n"
        "runpy.run_module('cactus_bench', run_name='__main__', alter_sys=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2 and "delta=-1.0 is not valid" in out.stderr
    assert "HEAVY []" in out.stderr
    assert not (tmp_path / "outputs").exists() and not list(tmp_path.glob("*.log"))  # nothing left behind


def test_load_failures_are_one_paragraph_naming_the_key(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "CACTUS_BENCH_RESULTS": str(tmp_path)}
    text = one_paragraph(cli("pair.drafter=/nonexistent/drafter", "pair.verifier=nobody/missing-model", env=env))
    assert "pair.drafter=/nonexistent/drafter does not exist: point it at a model folder" in text
    assert "pair.verifier=nobody/missing-model is not in the local hub cache" in text  # both, before either loads
    debug = cli("--debug", "pair.drafter=/nonexistent/drafter", env=env)
    assert debug.returncode == 2 and "Traceback" in debug.stderr


def test_unknown_top_level_keys_fail_on_the_command_line(tmp_path):
    text = one_paragraph(cli("+detla=0.5", env={"CACTUS_BENCH_RESULTS": str(tmp_path)}))
    assert "detla is not a setting of a run" in text


def test_offline_everything_missing_is_named_at_once_before_anything_loads(tmp_path, monkeypatch, caplog):
    """Without network a run retried the hub for half a minute per file, then named one missing thing at a
    time (the verifier, then the data). Now: offline at once, the local data copy used when there is one, and
    every missing model and dataset in one paragraph, each with its fix."""
    import logging

    from cactus_bench.app import offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(offline, "hub_reachable", lambda: False)
    offline.go_offline_without_network()
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"

    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded a model before naming what is missing"))
    cfg = cfg_of("method=cactus", "data=gsm8k", "paths.data=/nonexistent", results=tmp_path)
    with pytest.raises(DataError) as e:
        run_mod.run(cfg)
    said = " ".join(str(e.value).split())
    assert "data root '/nonexistent'" in said and "pair.verifier=Qwen/Qwen3-8B is not in the local hub cache" in said
    assert "pair.drafter=Qwen/Qwen3-0.6B" in said and "huggingface-cli download" in said
    with pytest.raises(DataError, match="pair.verifier=/no/such/model does not exist: point it at a model folder"):
        run_mod.run(cfg_of("method=ar", "data=arith", "pair.verifier=/no/such/model", results=tmp_path))

    caplog.set_level(logging.INFO, "cactus_bench")
    monkeypatch.setattr(offline, "LOCAL_DATA", tmp_path)  # the copy beside the checkout
    local = cfg_of("data=gsm8k", "paths.data=null")  # no data folder set
    offline.use_local_data(local)
    assert local.data.root == str(tmp_path) and "reading the benchmark files from" in caplog.text
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online: the hub, as configured
    online = cfg_of("data=gsm8k", "paths.data=null")
    offline.use_local_data(online)
    assert online.data.root is None


@pytest.mark.parametrize(
    "override,says",
    [
        ("detla=0.5", "detla is not a setting of a run. Did you mean delta?"),
        ("results_dir=/x", "results_dir was renamed: use paths.runs (the runs folder;"),  # before: "not a setting"
        ("method=cactuss", "method=cactuss is not valid (did you mean cactus?): choose one of approximate, ar, cactus"),
        ("m=ten", "m='ten' is not valid: an integer is needed"),
        ("limit=1.5", "limit='1.5' is not valid: an integer is needed"),
    ],
)
def test_what_hydra_refuses_is_one_paragraph(override, says, tmp_path):
    from cactus_bench.__main__ import main

    out = run_main(main, override, env={"CACTUS_BENCH_RESULTS": str(tmp_path)})
    assert out.returncode == 2 and "Traceback" not in out.stderr and "HYDRA_FULL_ERROR" not in out.stderr
    assert says in " ".join(out.stderr.split())


@pytest.mark.parametrize("flags", [("--cfg", "job"), ("-c", "job"), ("--cfg=job",), ("--info", "defaults")])
def test_hydras_flags_with_their_value_as_the_next_word_work(flags):
    """`--cfg job` and `-c job` (how Hydra users type them) failed: `job` was read as an override."""
    from cactus_bench.__main__ import main

    out = run_main(main, *flags, "method=sps", "pair=tiny")
    assert out.returncode == 0, out.stderr
    assert "name: sps" in out.stdout or "method: sps" in out.stdout or "Defaults" in out.stdout


def test_temperature_zero_is_greedy_and_one_run_with_it():
    """`sampling.temperature=0` decodes greedily whatever top-k and top-p say, but was another run than
    `sampling=greedy` (another key, another table row); any other temperature keeps its own identity."""
    from cactus_bench.app.identity import RunIdentity

    greedy = RunIdentity.of(cfg_of("sampling=greedy")).key
    assert RunIdentity.of(cfg_of("sampling.temperature=0")).key == greedy
    assert RunIdentity.of(cfg_of("sampling=plain", "sampling.temperature=0.0")).key == greedy
    assert RunIdentity.of(cfg_of("sampling.temperature=0.6")).key != greedy


def test_a_name_that_would_leave_the_results_folder_writes_nothing(tmp_path):
    """`pair.name=../../x` at the command line: one paragraph, and no folder anywhere but where it was."""
    out = cli("method=sps", "limit=1", "pair.name=../../escaped", f"paths.results={tmp_path / 'results'}")
    assert "pair.name='../../escaped' is not valid" in one_paragraph(out)
    assert not (tmp_path / "escaped").exists() and not list(tmp_path.rglob("samples.jsonl"))


def test_a_spec_whose_name_would_leave_the_tables_folder_is_refused(tmp_path):
    from cactus_bench.tools.report import load_spec
    from cactus_bench.tools.report.specs import SpecError

    spec = tmp_path / "escape.yaml"
    spec.write_text((ROOT / "sweeps" / "demo.yaml").read_text().replace("name: demo", "name: ../../x", 1))
    with pytest.raises(SpecError, match="name: '../../x' is not valid: it becomes a folder"):
        load_spec(spec)


@pytest.mark.parametrize(
    "content,match",
    [("", "is empty \\(0 bytes\\)"), ('{"question": "q", "answer": "a"}\n{cut\n', "line 2, is not a JSON object")],
)
def test_a_damaged_data_file_is_named_in_one_paragraph(tmp_path, content, match):
    from cactus_bench.adapters.benchmarks.data import load_gsm8k

    (tmp_path / "gsm8k").mkdir()
    for split in ("train", "test"):
        (tmp_path / "gsm8k" / f"{split}.jsonl").write_text(content)
    with pytest.raises(DataError, match=match) as e:
        load_gsm8k(tmp_path)
    assert str(tmp_path / "gsm8k") in str(e.value)


def test_an_unquoted_value_beyond_ascii_gets_the_hint_to_quote_it(tmp_path):
    out = cli("method=sps", f"paths.results={tmp_path}/résultats")
    said = one_paragraph(out)
    assert "must be quoted" in said and f"'paths.results=\"{tmp_path}/résultats\"'" in said, said
    assert "résultats" not in [p.name for p in tmp_path.iterdir()]

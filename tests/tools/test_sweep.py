"""The sweep (sweep.py) and its cost plan (plan.py): each cell is the same run however it is run, every sweep
states its engine, and the plan prices every cell from stored runs, measurements or the cost model."""

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from cactus_bench.app import run as run_mod
from cactus_bench.app.schema import CONF_DIR

from ..helpers.cli import run_main

ROOT = Path(__file__).resolve().parents[2]


def test_plan_prints_a_costed_table_for_table1():
    """Eager and fast side by side at batch size 1, and the fast engine at the spec's batch size (auto):
    the launch-bound eager engine costs several times the fast one; batching divides the fast one again."""
    from cactus_bench.tools.plan import main

    text = main(["sweeps/table1.yaml", "shards=8", "gpu=h200"])
    assert "8 shard(s), 1 per H200 (8 GPU(s))" in text and "estimate" in text
    rows = [line for line in text.splitlines() if line.startswith("| gsm8k")]
    assert len(rows) == 5 and "1319" in rows[0]  # every Table 1 row on GSM8K, all its items
    header = next(line for line in text.splitlines() if line.startswith("| data"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    total = [
        c.strip() for c in next(line for line in text.splitlines() if line.startswith("| total")).strip("|").split("|")
    ]
    eager, fast, batched = (float(total[cols.index(c)]) for c in ("eager B=1 GPU h", "fast B=1 GPU h", "chosen GPU h"))
    assert eager > 4 * fast > 4 * batched and "| fast " in rows[0]  # the spec's engine (auto) is the fast one
    forced = main(["sweeps/table1.yaml", "engine=eager", "gpu=h200"])  # a spec or override naming eager is costed so
    assert "| eager " in next(line for line in forced.splitlines() if line.startswith("| gsm8k"))
    assert main(["sweeps/table1.yaml", "shards=8", "slots_per_gpu=2", "gpu=h200"]).count("(4 GPU(s))") == 1
    # the vllm backend is priced by its own engines, each job paying its engine's start-up
    vllm = main(["sweeps/table1.yaml", "engine=vllm", "gpu=h200"])
    header = next(line for line in vllm.splitlines() if line.startswith("| data"))
    assert "compiled B=1 GPU h" in header and "start-up h" in header and "start-up h" not in text
    assert "| compiled " in next(line for line in vllm.splitlines() if line.startswith("| gsm8k"))


def test_the_plan_prices_a_cells_methods_timed_together_with_one_verifier_alone_decode_an_item():
    """Unsharded, Table 1's four drafting rows share each timed item's verifier-alone decode (the sweep's
    default, `timing=together`): their timing hours fall by three quarters of the verifier-alone part, which
    `timing=apart` and a sharded plan price in full."""
    from cactus_bench.tools.plan import plan
    from cactus_bench.tools.report import load_spec

    spec = load_spec(ROOT / "sweeps" / "table1.yaml")
    two_rows = {**spec, "rows": spec["rows"][:3]}  # the verifier alone, SpS and TAS

    def timing_hours(spec, **kw):
        df = plan(spec, gpu="h200", **kw)
        return float(df[(df["data"] == "gsm8k") & (df["row"] == "SpS")]["timing GPU h"].iloc[0])

    apart, sharded = timing_hours(spec, timing="apart"), timing_hours(spec, shards=8)
    four, two = timing_hours(spec), timing_hours(two_rows)
    assert apart == sharded == timing_hours(two_rows, timing="apart") and 0 < four < two < apart
    # shared by k rows, a row pays 1/k of the verifier-alone decodes: 3/4 of them saved against 1/2
    assert (apart - four) / (apart - two) == pytest.approx(1.5)
    specbench = load_spec(ROOT / "sweeps" / "table2.yaml")  # its questions' turns differ by method: apart
    hours = [plan(specbench, gpu="h200", timing=t)["timing GPU h"].tolist() for t in ("together", "apart")]
    assert hours[0] == hours[1] and any(isinstance(h, float) and h > 0 for h in hours[0]), hours


def test_the_plan_reads_dataset_facts_from_conf_data_and_refuses_a_dataset_without_them():
    """Item counts come from conf/data (GPQA by subset); before, a dataset missing from plan's own table was
    priced at 0 items, silently."""
    from cactus_bench.tools.plan import main

    text = main(["sweeps/table1.yaml", "gpu=h200", "data.subset=main"])
    assert [line.split("|")[3].strip() for line in text.splitlines() if line.startswith("| gpqa")][0] == "448"
    out = run_main(main, "sweeps/table1.yaml", "gpu=h200", "data.items=null")
    assert out.returncode == 2  # one paragraph, as every tool's mistakes
    assert "data=gsm8k: conf/data/gsm8k.yaml states no items, so the plan cannot price" in " ".join(out.stderr.split())


def test_the_sweep_writes_each_cell_as_the_same_run(small_pair_dir, tmp_path):
    """A cell config (what the multirun runs) composes to the identity `run_overrides` composes to."""
    from cactus_bench.app.identity import RunIdentity
    from cactus_bench.tools.report import compose_cell, load_spec
    from cactus_bench.tools.report.specs import cell_config

    spec = load_spec(ROOT / "sweeps" / "delta_grid.yaml", {"pair": "tiny", "limit": 2})
    import yaml

    (tmp_path / "cell").mkdir()
    for i, row in enumerate(spec["rows"]):
        (tmp_path / "cell" / f"c{i}.yaml").write_text(
            "# @package _global_\n" + yaml.safe_dump(cell_config(spec, row, "gpqa"), sort_keys=False)
        )
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            via_cell = compose("config", overrides=[f"hydra.searchpath=[file://{tmp_path}]", f"+cell=c{i}"])
        assert RunIdentity.of(via_cell) == RunIdentity.of(compose_cell(spec, row, "gpqa")), row["label"]


def test_every_sweep_states_its_engine_and_its_cells_run_it():
    """A sweep names the engine its runs use (issue 21), and both ways of running a cell (in-process
    overrides, a multirun's `+run` config) carry it; a sweep's `engine=` override replaces it."""
    from cactus_bench.tools.report import compose_cell, load_spec
    from cactus_bench.tools.report.specs import cell_config
    from cactus_bench.tools.sweep import parse

    engines = {p.stem for p in (CONF_DIR / "engine").glob("*.yaml")}
    specs = [p for p in sorted((ROOT / "sweeps").glob("*.yaml")) if "\nrows:" in p.read_text()]  # not W&B's
    assert len(specs) >= 7
    for path in specs:
        spec = load_spec(path)
        assert spec.get("engine") in engines, path.name
        row, data = spec["rows"][0], spec["data"][0]
        assert compose_cell(spec, row, data).engine.name == spec["engine"]
        assert {"override /engine": spec["engine"]} in cell_config(spec, row, data)["defaults"]
    _, spec_overrides, hydra_overrides, _, _, timing = parse(["sweeps/table1.yaml", "engine=eager"])
    assert spec_overrides == {"engine": "eager"} and hydra_overrides == [] and timing == "together"
    spec = load_spec(ROOT / "sweeps" / "table1.yaml", spec_overrides)
    assert compose_cell(spec, spec["rows"][1], "gsm8k").engine.name == "eager"


def test_a_sweep_checks_every_cell_before_running_any(tmp_path, monkeypatch):
    from cactus_bench.tools import sweep

    monkeypatch.setattr(run_mod, "run", lambda *a, **k: pytest.fail("a cell ran before every cell was checked"))
    out = run_main(
        sweep.main,
        "sweeps/lossy_tradeoff.yaml",
        "pair=tiny",
        "limit=3",
        "max_gen_toks=16",
        "data=arith",
        env={"CACTUS_BENCH_RESULTS": str(tmp_path)},
        prog="cactus_bench.tools.sweep",
    )
    text = " ".join(out.stderr.split())
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "lossy_tradeoff, cell SpS on arith (tiny): m=20 is not valid" in text


def test_a_multirun_files_its_launcher_files_under_the_results_folder(tmp_path):
    from hydra import compose, initialize_config_dir

    from cactus_bench.app.schema import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", [f"paths.results={tmp_path}"], return_hydra_config=True)
    assert str(cfg.hydra.sweep.dir).startswith(f"{tmp_path}/multirun/")


def test_the_slurm_launcher_without_slurm_is_one_paragraph_before_any_work(tmp_path, monkeypatch):
    """`hydra/launcher=slurm` where SLURM is not installed failed in submitit ("Could not detect srun") after
    composing every cell, and the sweep then advised rerunning it."""
    from cactus_bench.app import cluster
    from cactus_bench.tools.sweep import main

    monkeypatch.setattr(cluster.shutil, "which", lambda command: None)
    args = ("sweeps/demo.yaml", "limit=2", "hydra/launcher=slurm")
    out = run_main(main, *args, env={"CACTUS_BENCH_RESULTS": str(tmp_path)})
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "hydra/launcher=slurm submits every run as a SLURM job" in said
    assert "no sbatch, squeue, sacct" in said and "Nothing was submitted" in said and "Traceback" not in said
    assert "run the same sweep command again" not in said and not (tmp_path / "runs").exists()


def test_slurm_without_a_controller_is_one_paragraph_before_any_work(tmp_path):
    """SLURM's commands installed but no controller answering (a laptop with the client, a login node whose
    controller is down): sbatch's "Could not establish a configuration source" came out of submitit as a
    traceback after every cell was composed, from the sweep (which then advised rerunning) and from
    `python -m cactus_bench -m ... hydra/launcher=slurm` alike; the refusal came after Hydra had written the
    sweep's multirun/<time>/multirun.yaml."""
    from cactus_bench.__main__ import main as run_cli
    from cactus_bench.tools.sweep import main

    bin_dir = tmp_path / "bin"  # SLURM's client, its controller unreachable: what sinfo and sbatch then say
    bin_dir.mkdir()
    for command in ("sbatch", "squeue", "sacct", "sinfo"):
        script = bin_dir / command
        script.write_text(
            f"#!/bin/sh\necho '{command}: fatal: Could not establish a configuration source' >&2\nexit 1\n"
        )
        script.chmod(0o755)
    env = {"CACTUS_BENCH_RESULTS": str(tmp_path), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    for out in (
        run_main(main, "sweeps/demo.yaml", "limit=2", "hydra/launcher=slurm", env=env),
        run_main(run_cli, "-m", "pair=tiny", "method=sps,ar", "data=arith", "limit=2", "hydra/launcher=slurm", env=env),
    ):
        said = " ".join(out.stderr.split())
        assert out.returncode == 2 and "its controller does not answer" in said, said[-2000:]
        assert "Could not establish a configuration source" in said and "Nothing was submitted" in said
        assert "Traceback" not in said and "run the same sweep command again" not in said
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "multirun").exists()  # Hydra's sweep folder (multirun.yaml) was left behind too


def test_plan_prices_a_backend_from_its_cost_model_and_names_a_missing_one(monkeypatch):
    """The cost model lives outside `Backend` (tools/costs.py `COSTS`, entry-point group cactus_bench.costs):
    registration refuses an engine without its launch floor, and a plan for a backend without a cost model
    is one paragraph naming it."""
    from cactus_bench.tools.costs import COSTS, CostModel
    from cactus_bench.tools.plan import main

    with COSTS.scoped(), pytest.raises(ValueError, match=r"GPU engine\(s\) \['graph'\] have no launch_s_per_layer"):
        COSTS.add("mine", CostModel(gpu_engine={"auto": "graph"}, launch_s_per_layer={}))
    monkeypatch.delitem(COSTS._items, "vllm")
    out = run_main(main, "sweeps/table1.yaml", "engine=vllm", "gpu=h200")
    assert out.returncode == 2 and "unknown backend cost model 'vllm'" in out.stderr, out


@pytest.mark.parametrize("offline", ["1", "0"])
def test_the_sources_line_fits_a_terminal_beside_a_long_data_path(monkeypatch, offline):
    """Where data and weights come from is one line each: a CI checkout's data path (42 characters) once pushed
    the combined line past 120 columns."""
    from cactus_bench.tools.report.tables import TERMINAL_WIDTH
    from cactus_bench.tools.sweep import sources

    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    data = "/check/work/a-longer-checkout-path/shared/data"
    lines = sources(data).splitlines()
    assert lines[0] == f"data: {data}" and lines[1].startswith("weights: ")
    assert all(len(line) <= TERMINAL_WIDTH for line in lines), lines


def test_the_typical_acceptance_follows_the_draft_length():
    """With no stored run the plan prices a method by a typical AL: Table 1's at m = 20, and at another m the
    i.i.d. acceptance law fitted to it (a shorter draft keeps its likelier first acceptances: at m = 10 SpS
    accepts 4.28, not the 2.5 a share of m would give)."""
    from cactus_bench.tools.plan import TYPICAL_AL, typical_al

    for method, at_20 in TYPICAL_AL.items():
        assert typical_al(method, 20) == pytest.approx(at_20)
        alpha = typical_al(method, 1)  # one draft: its acceptance probability
        for m in (4, 10, 40):
            assert typical_al(method, m) == pytest.approx(alpha * (1 - alpha**m) / (1 - alpha))
        assert at_20 * 10 / 20 < typical_al(method, 10) < at_20 < typical_al(method, 40)
    assert typical_al("sps", 10) == pytest.approx(4.276, abs=1e-3)


def test_the_plans_title_names_every_override():
    """`plan sweeps/table1.yaml pair=tiny data=arith m=10` is not titled as Table 1's own setting."""
    from cactus_bench.tools.plan import main

    title = main(["sweeps/table1.yaml", "pair=tiny", "data=arith", "m=10"]).splitlines()[0]
    assert "pair tiny, not the paper's" in title and "m=10" in title and "data=arith" in title, title
    assert (
        main(["sweeps/table1.yaml"]).splitlines()[0]
        == "## Plan: Table 1: drafter Qwen3-0.6B, verifier Qwen3-14B, m = 20"
    )

"""The run configuration's schema: structured configs that Hydra type-checks at composition, the config
groups, and the `--help` text generated from both. Imports only Hydra and OmegaConf (so `--help` is
instant); the semantic checks are in `config.py`."""

from __future__ import annotations

from dataclasses import MISSING as NO_DEFAULT
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # inside the package, so wheels carry it
# The checkout's sweeps/ and committed device figures (results/gpu/), found from the code, not the working
# directory (absent from a wheel install: then there are none)
PROJECT_DIR = Path(__file__).resolve().parents[2]
SWEEPS_DIR = PROJECT_DIR / "sweeps"
DEVICE_RESULTS_DIR = PROJECT_DIR / "results" / "gpu"


# settings renamed since they were documented: an old command line is told the new name
RENAMED_SETTINGS = {
    "results_dir": "paths.runs (the runs folder; paths.results moves every output: runs, tables, figures)",
}


def renamed_message(key: str) -> str:
    new = RENAMED_SETTINGS[key]
    return f"{key} was renamed: use {new}, e.g. {new.split()[0]}=..."


def doc(text: str, default: Any = NO_DEFAULT, factory: Any = NO_DEFAULT):
    """A schema field with its one-line help (what `--help` prints)."""
    if factory is not NO_DEFAULT:
        return field(default_factory=factory, metadata={"help": text})
    return field(default=default, metadata={"help": text})


@dataclass
class PairConfig:
    name: str = MISSING
    drafter: str = MISSING
    verifier: str = MISSING
    max_gen_toks: int = 4096  # the pair's default token budget (the top-level max_gen_toks reads it)
    dtype: str = "auto"  # both models' (bf16 on CUDA, fp32 on a CPU), unless one of the two below is set
    drafter_dtype: str | None = None
    verifier_dtype: str | None = None
    device: str = "auto"
    verifier_device_map: Any = None
    revision: str | None = None
    add_bos_token: bool = False  # prepend BOS to every prompt (lm-eval does for Gemma)
    tensor_parallel_size: int = 1  # GPUs the verifier is sharded over (engine=vllm; a SLURM job asks for as many)


@dataclass
class MethodConfig:
    name: str = MISSING
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataConfig:
    """A dataset's facts live in conf/data/<name>.yaml: adding a dataset is a loader, a task YAML and that."""

    name: str = MISSING
    kind: str = "task"  # a registered benchmark kind: task (lm-eval scored) | specbench
    task: str | None = None  # the lm-eval task (benchmarks/tasks/<task>.yaml)
    primary_metric: str | None = None  # the headline score, "metric,filter"
    label: str = "${.name}"  # names the data in run folders and tables (e.g. gpqa_diamond)
    root: str | None = None
    subset: str | None = None
    subsets: list[str] | None = None  # the valid subsets, where there are any
    warmup: int = 3
    # What `plan` prices a sweep with before any run exists (it refuses a dataset without them): the item
    # count (by subset, where there are subsets) and a Qwen3 reply's and prompt's typical length in tokens
    items: Any = None
    typical_new_tokens: int | None = None
    typical_prompt_tokens: int | None = None


@dataclass
class SamplingConfig:
    """Types only: the values are the chosen conf/sampling/*.yaml's (paper: 0.6 / 20 / 0.95), stated once."""

    temperature: float = MISSING
    top_k: int = MISSING
    top_p: float = MISSING


@dataclass
class TrackingConfig:
    backend: str = "none"
    project: str = "cactus-bench"
    entity: str | None = None
    mode: str | None = None
    group: str | None = None


@dataclass
class EngineConfig:
    backend: str = "hf"  # a registered decode backend (decode.api.DECODERS)
    name: str = "auto"  # the backend's engine (hf: eager | fast | auto; vllm: eager | compiled | auto)
    settings: dict[str, Any] = field(default_factory=dict)  # the backend's own (conf/engine/<backend>.yaml)


@dataclass
class PathsConfig:
    """Every folder the app reads or writes, in one place (conf/paths/default.yaml reads the environment)."""

    results: str = "results"
    runs: str = "${.results}/runs"
    tables: str = "${.results}/tables"
    figures: str = "${.results}/figures"
    multirun: str = "${.results}/multirun"
    data: str | None = None  # local benchmark files (the layout of ../shared/data); null: the hub
    cache: str | None = None  # the embedded pair's cache; null: ~/.cache/cactus_bench


@dataclass
class RunConfig:
    pair: PairConfig = field(default_factory=PairConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    delta: float = doc("Cactus's divergence budget (methods read it as ${delta})", 1.0)
    m: int = doc("draft length: tokens proposed per verifier call", 10)
    seed: int = doc("run seed: each item's random stream comes from it and the item", 0)
    limit: int | None = doc("decode the first N items (null: all)", None)
    max_gen_toks: int = doc("token budget per reply (the pair's: 4096; 128 for pair=tiny)", 4096)
    shard: str | None = doc("i/n: decode only items i, i+n, ... (a cluster job each)", None)
    pack: Any = doc("set by the sweep (slots_per_gpu): the runs of one SLURM job, one per task", None)
    batch_size: Any = doc(
        "items decoded at once (auto: as many as fit the device's memory); not part of a run's identity", 1
    )
    paired_timing: bool = doc("time every item beside the verifier alone, back to back (batch_size=1)", False)
    timing_sample: int | None = doc("after a batched decode, time N items (by prompt length) at batch size 1", None)
    threads: int | None = doc("torch threads on a CPU (1: timings hold on a busy machine; null: torch's)", 1)
    experiment_name: str = doc("groups runs (a sweep's name; W&B group)", "default")
    progress: bool = doc("show a progress bar", True)


ConfigStore.instance().store(name="schema", node=RunConfig)

GROUPS = {  # config group -> what it chooses (the --help text; options are the files in conf/<group>/)
    "pair": "drafter and verifier (any model: pair.drafter=ID_OR_PATH pair.verifier=...)",
    "method": "acceptance rule (ar: the verifier alone)",
    "data": "benchmark",
    "sampling": "warpers shared by both models",
    "engine": "decode backend and engine",
    "tracking": "experiment tracking",
    "paths": "folders read and written",
}
NESTED = "sampling.temperature, method.params.<name>, pair.device, data.subset, tracking.mode, paths.results, ..."
EXAMPLES = (
    "python -m cactus_bench method=cactus delta=0.75 data=gpqa",
    "python -m cactus_bench pair=tiny method=cactus delta=0.75 data=gsm8k limit=3",
    "python -m cactus_bench -m method=sps,cactus delta=0.75,1.0 hydra/launcher=slurm",
)


def group_defaults() -> dict[str, str]:
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    return {k: v for d in defaults if isinstance(d, dict) for k, v in d.items() if k in GROUPS}


def top_level_defaults() -> dict[str, Any]:
    return {k: v for k, v in yaml.safe_load((CONF_DIR / "config.yaml").read_text()).items() if k != "defaults"}


def help_text() -> str:
    """`python -m cactus_bench --help`: the groups and their options, the top-level keys with their defaults
    and meaning, from the schema and conf/."""
    lines = [
        "python -m cactus_bench [KEY=VALUE ...]      one run: a drafter/verifier pair decodes a benchmark with one",
        "                                            acceptance rule; logs AL, Rej, the task score and the speedup",
        "python -m cactus_bench -m KEY=A,B ...       a sweep (Hydra multirun; hydra/launcher=slurm for a cluster)",
        "",
        "Config groups (conf/<group>/<option>.yaml), chosen as GROUP=OPTION; * marks the default:",
    ]
    chosen = group_defaults()
    for group, what in GROUPS.items():
        options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        marked = " ".join(f"{o}*" if o == chosen.get(group) else o for o in options)
        if group == "method":  # generated from the rules (app/method_configs.py), which need torch to list
            marked = (
                f"ar or a registered rule ({chosen[group]}*); `cactus-bench rules` lists them with their parameters"
            )
        lines.append(f"  {group:<10} {what}")
        lines.append(f"  {'':<10}   {marked}")
    lines += ["", "Top-level keys (KEY=VALUE):"]
    values = top_level_defaults()
    for f in fields(RunConfig):
        if "help" in f.metadata:
            default = yaml.safe_dump(values.get(f.name, f.default)).removesuffix("\n...\n").strip()
            lines.append(f"  {f.name + '=' + default:<34} {f.metadata['help']}")
    lines += ["", f"Nested keys: {NESTED}", "", "Examples:", *(f"  {e}" for e in EXAMPLES), ""]
    lines += [
        "Errors are one paragraph; --debug (or CACTUS_BENCH_DEBUG=1) shows the traceback too.",
        "Docs: README.md and docs/; the protocol behind the paper's numbers: docs/protocol.md.",
    ]
    return "\n".join(lines)


def default_paths():
    """The `paths` group as a run would compose it (the environment applied): for tools without Hydra."""
    from omegaconf import OmegaConf

    node = OmegaConf.merge(OmegaConf.structured(PathsConfig), OmegaConf.load(CONF_DIR / "paths" / "default.yaml"))
    return OmegaConf.create(OmegaConf.to_container(node, resolve=True))

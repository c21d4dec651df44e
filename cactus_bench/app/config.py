"""The run configuration's semantic validation, which runs before anything expensive and names the bad key
and its allowed values (the schema Hydra type-checks is in `schema.py`), and what a run builds from it."""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cactus_bench.adapters.benchmarks.base import KINDS
from cactus_bench.app.identity import RunIdentity, pair_label
from cactus_bench.app.schema import (
    CONF_DIR,
    RENAMED_SETTINGS,
    DataConfig,
    EngineConfig,
    MethodConfig,
    PairConfig,
    PathsConfig,
    RunConfig,
    SamplingConfig,
    TrackingConfig,
    renamed_message,
)
from cactus_bench.core.decode.api import DecodeSpec, ModelSpec, backend, backend_names
from cactus_bench.core.methods import Method, method_names
from cactus_bench.core.precision import DTYPES, resolve_device, resolved_dtypes
from cactus_bench.core.utils import path_part_problem

TRACKERS = ("none", "wandb")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class RunSpec:
    """A run validated and resolved once (`validate`): what every later step reads. The identity is computed
    here and nowhere else in a run; `precision` is what `dtype: auto` means on this machine (a resume in
    another precision is refused by the store)."""

    cfg: DictConfig
    method: Method
    identity: RunIdentity
    decode: DecodeSpec
    models: ModelSpec  # as configured: the app maps an embedded pair's name to its folder when it loads
    precision: dict  # verifier_dtype, and drafter_dtype where the method drafts: float32, bfloat16, float16

    def loading(self, resolve) -> ModelSpec:
        """The models with `resolve` applied to their names (the app's: an embedded pair's folder)."""
        m = self.models
        return replace(m, verifier=resolve(m.verifier), drafter=None if m.drafter is None else resolve(m.drafter))


log = logging.getLogger("cactus_bench")
HYDRA_KEYS = {"hydra"}
DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")


def _where(key: str) -> str | None:
    """The nested key of that name (`temperature` -> `sampling.temperature`), for a misplaced top-level key."""
    for group, node in (
        ("pair", PairConfig),
        ("method", MethodConfig),
        ("data", DataConfig),
        ("sampling", SamplingConfig),
        ("tracking", TrackingConfig),
        ("engine", EngineConfig),
        ("paths", PathsConfig),
    ):
        if key in {f.name for f in fields(node)}:
            return f"{group}.{key}"
    return None


def unknown_keys(cfg: DictConfig) -> None:
    """`+temperature=-1` or `+detla=0.5` would be accepted and ignored: refuse keys the schema lacks."""
    known = {f.name for f in fields(RunConfig)} | HYDRA_KEYS
    for key in cfg:
        if key in known:
            continue
        if key in RENAMED_SETTINGS:
            raise ConfigError(renamed_message(key))
        nested = _where(key)
        hint = f" It lives at {nested} (e.g. {nested}=...)." if nested else ""
        close = difflib.get_close_matches(key, sorted(known - HYDRA_KEYS), n=1)
        hint += f" Did you mean {close[0]}?" if close and not nested else ""
        raise ConfigError(f"{key} is not a setting of a run.{hint} `python -m cactus_bench --help` lists them.")


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """`shard=i/n` -> (i, n), 0 <= i < n; None for an unsharded run (and for 0/1, the same run)."""
    if value is None:
        return None
    try:
        i, n = (int(x) for x in str(value).split("/"))
    except ValueError:
        raise ConfigError(f"shard={value!r} is not valid: write i/n, e.g. shard=0/4 (the first of 4 shards)") from None
    if not 0 <= i < n:
        raise ConfigError(f"shard={value!r} is not valid: i/n needs 0 <= i < n")
    return (i, n) if n > 1 else None


def _finite(key: str, value) -> None:
    if not math.isfinite(float(value)):
        raise ConfigError(f"{key}={value!r} is not valid: a finite number is needed")


def _check_device_and_dtype(pair) -> None:
    for key in ("dtype", "drafter_dtype", "verifier_dtype"):
        value = pair.get(key)
        if value is not None and value != "auto" and value not in DTYPES:
            raise ConfigError(f"pair.{key}={value!r} is not valid: choose auto, {', '.join(DTYPES)}")
    device = str(pair.device)
    if not (device in ("auto", "cpu", "mps") or re.fullmatch(r"cuda(:\d+)?", device)):
        raise ConfigError(f"pair.device={device!r} is not valid: choose one of {', '.join(DEVICES)}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"pair.device={device} but this machine has no CUDA GPU: use pair.device=cpu (or auto)")


def _check_tracking(t) -> None:
    if t.backend != "wandb":
        return
    mode = t.mode or os.environ.get("WANDB_MODE")
    if mode in ("offline", "disabled", "dryrun"):
        return
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    logged_in = os.environ.get("WANDB_API_KEY") or (netrc.is_file() and "api.wandb.ai" in netrc.read_text())
    if not logged_in:
        raise ConfigError(
            "tracking=wandb needs a W&B login: run `wandb login` (or set WANDB_API_KEY), or log offline with "
            "tracking.mode=offline and `wandb sync` the run later."
        )


_SAID: set = set()


def _once(key) -> bool:
    """True the first time `key` is seen in this process (a sweep validates every cell: say a note once)."""
    if key in _SAID:
        return False
    _SAID.add(key)
    return True


def _note_unused(cfg: DictConfig, method: Method) -> None:
    """Settings the method does not read are ignored, with one line saying so."""
    raw = OmegaConf.to_container(cfg.method.params, resolve=False) or {}
    if cfg.delta != RunConfig.delta and "${delta}" not in raw.values():
        log.info("note: delta=%s is not used by method=%s (ignored)", cfg.delta, cfg.method.name)
    if not method.uses_drafter and cfg.m != RunConfig.m:
        log.info("note: m=%s is not used by method=%s (ignored)", cfg.m, cfg.method.name)
    if str(cfg.pair.verifier).startswith("embedded:tiny/") and cfg.data.name != "arith" and _once(cfg.data.name):
        log.info(
            "note: the embedded tiny pair knows only arith: its replies on %s are noise (it checks the pipeline "
            "end to end; scores mean nothing)",
            cfg.data.name,
        )
    if cfg.timing_sample is not None and cfg.batch_size == 1 and method.uses_drafter:
        log.info(
            "note: timing_sample=%s is not used at batch_size=1: every item is timed as it decodes (ignored)",
            cfg.timing_sample,
        )


def validate(cfg: DictConfig) -> RunSpec:
    """Check every value a run depends on (the method's rule too) and resolve the run once."""

    def bad(key, value, allowed):
        raise ConfigError(f"{key}={value!r} is not valid: {allowed}")

    unknown_keys(cfg)

    if cfg.method.name not in method_names():
        bad("method", cfg.method.name, f"choose one of {', '.join(method_names())}")
    d = cfg.data
    if d.kind not in KINDS:
        bad("data.kind", d.kind, f"choose one of {', '.join(KINDS)}")
    if d.kind == "task" and not (d.task and d.primary_metric):
        bad("data", d.name, f"conf/data/{d.name}.yaml must name its lm-eval `task` and `primary_metric`")
    if d.subsets is not None and d.subset not in d.subsets:
        bad("data.subset", d.subset, f"choose one of {', '.join(d.subsets)}")
    _finite("delta", cfg.delta)
    if cfg.delta < 0:
        bad("delta", cfg.delta, "the divergence budget must be >= 0")
    if cfg.limit is not None and cfg.limit < 1:
        bad("limit", cfg.limit, "a positive number of items, or null for all")
    if cfg.max_gen_toks < 1:
        bad("max_gen_toks", cfg.max_gen_toks, "must be >= 1")
    b = cfg.batch_size
    if b != "auto" and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
        bad("batch_size", b, "a positive integer, or auto (as many as fit the device's memory)")
    if cfg.paired_timing and b != 1:
        bad("paired_timing", True, f"it times every item at batch size 1, not {b}: use timing_sample=N with batching")
    if cfg.timing_sample is not None and cfg.timing_sample < 1:
        bad("timing_sample", cfg.timing_sample, "a positive number of items to time, or null")
    if cfg.threads is not None and cfg.threads < 1:
        bad("threads", cfg.threads, "a positive number of torch threads, or null (torch's default)")
    s = cfg.sampling
    for key in ("temperature", "top_p"):
        _finite(f"sampling.{key}", s[key])
    if s.temperature < 0:
        bad("sampling.temperature", s.temperature, "must be >= 0 (0 = greedy)")
    if s.top_k < 0:
        bad("sampling.top_k", s.top_k, "an integer >= 0 (0 = off)")
    if not 0 < s.top_p <= 1:
        bad("sampling.top_p", s.top_p, "must be in (0, 1]")
    if cfg.tracking.backend not in TRACKERS:
        bad("tracking.backend", cfg.tracking.backend, f"choose one of {', '.join(TRACKERS)}")
    _check_engine(cfg.engine)
    tp = cfg.pair.get("tensor_parallel_size", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        bad("pair.tensor_parallel_size", tp, "a positive number of GPUs")
    if tp > 1 and not backend(cfg.engine.backend).tensor_parallel:
        bad(
            "pair.tensor_parallel_size",
            tp,
            f"engine.backend={cfg.engine.backend} does not shard a model: use engine=vllm, or spread the verifier "
            "with pair.verifier_device_map=auto",
        )
    parse_shard(cfg.shard)
    try:
        method = method_of(cfg)
    except ValueError as e:
        raise ConfigError(f"method.params: {e}") from None
    if method.uses_drafter and not 1 <= cfg.m <= cfg.max_gen_toks:
        bad("m", cfg.m, f"the draft length must be an integer in [1, max_gen_toks={cfg.max_gen_toks}]")
    _name_the_pair(cfg, method)
    for key, name in (("pair.name", pair_label(cfg.pair, method.uses_drafter)), ("data.label", d.label)):
        problem = path_part_problem(name)
        if problem:
            bad(key, name, f"{problem}; the run's folder is named after it, inside paths.runs")
    _check_device_and_dtype(cfg.pair)
    _check_tracking(cfg.tracking)
    _note_unused(cfg, method)
    return RunSpec(
        cfg=cfg,
        method=method,
        identity=RunIdentity.of(cfg),
        decode=decode_spec(cfg, method),
        models=model_spec(cfg, method),
        precision=resolved_precision(cfg.pair, method),
    )


def resolved_precision(pair, method: Method) -> dict:
    """What the pair's dtypes (`auto` too) mean on this machine: float32 on a CPU, bfloat16 on CUDA."""
    resolve_device(pair.device)  # a device that is not here is refused now
    return resolved_dtypes(pair, ("verifier", "drafter") if method.uses_drafter else ("verifier",))


def _name_the_pair(cfg: DictConfig, method: Method) -> None:
    label = pair_label(cfg.pair, method.uses_drafter)
    if label != cfg.pair.name:
        log.info("pair: filed as %s, named after its models (set pair.name=... to choose a name)", label)


def _check_engine(engine) -> None:
    names = backend_names()
    if engine.backend not in names:
        raise ConfigError(f"engine.backend={engine.backend!r} is not valid: choose one of {', '.join(names)}")
    b = backend(engine.backend)
    if engine.name not in b.engines:
        raise ConfigError(
            f"engine.name={engine.name!r} is not valid for engine.backend={engine.backend}: choose one of "
            f"{', '.join(b.engines)}"
        )
    settings = OmegaConf.to_container(engine.settings, resolve=True) if engine.get("settings") else {}
    if settings and b.check_settings is None:
        raise ConfigError(f"engine.settings: engine.backend={engine.backend} has no settings; got {sorted(settings)}")
    if b.check_settings is not None:
        try:
            b.check_settings(settings)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    why = b.unavailable() if b.unavailable is not None else None
    if why:
        raise ConfigError(why)


def decode_spec(cfg: DictConfig, method: Method) -> DecodeSpec:
    """What the run decodes with besides the models: the one place a config becomes decode options."""
    return DecodeSpec(
        method=method,
        max_new_tokens=cfg.max_gen_toks,
        **OmegaConf.to_container(cfg.sampling, resolve=True),
        seed=cfg.seed,
        add_bos_token=cfg.pair.add_bos_token,
        backend=cfg.engine.backend,
        engine=cfg.engine.name,
        settings=OmegaConf.to_container(cfg.engine.settings, resolve=True) if cfg.engine.get("settings") else {},
        batch_size=cfg.batch_size,
        paired_timing=cfg.paired_timing,
    )


def model_spec(cfg: DictConfig, method: Method) -> ModelSpec:
    """The models the run's backend loads, as configured: the verifier, and the drafter only where the
    method uses one."""
    p = cfg.pair
    device_map = p.verifier_device_map
    if isinstance(device_map, DictConfig):
        device_map = OmegaConf.to_container(device_map)
    return ModelSpec(
        verifier=p.verifier,
        drafter=p.drafter if method.uses_drafter else None,
        dtype=p.dtype,
        drafter_dtype=p.drafter_dtype,
        verifier_dtype=p.verifier_dtype,
        device=p.device,
        verifier_device_map=device_map,
        revision=p.revision,
        tensor_parallel_size=p.get("tensor_parallel_size", 1),
    )


def method_of(cfg: DictConfig) -> Method:
    """The configured method (unvalidated values raise a ValueError: call `validate` first)."""
    return Method(cfg.method.name, OmegaConf.to_container(cfg.method.params, resolve=True) or {}, cfg.m)


def dataset_configs() -> dict[str, DictConfig]:
    """Every dataset of conf/data by its label, one per subset (e.g. gpqa_diamond, gpqa_main), plus each
    dataset's name for its default subset: what `score data=...` accepts."""
    out = {}
    for path in sorted((CONF_DIR / "data").glob("*.yaml")):
        base = OmegaConf.merge(OmegaConf.structured(DataConfig), OmegaConf.load(path))
        out.setdefault(base.name, base)
        for subset in base.subsets or []:
            node = OmegaConf.merge(base, {"subset": subset})
            out[node.label] = node
        out.setdefault(base.label, base)
    return out

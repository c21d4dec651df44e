"""A run's identity: what makes two runs the same run, computed in this one place.

The store names a run's folder by it (so a re-run resumes), tables and figures find the run of a cell by
it, a sweep writes each cell as the same run, and tracking finds a run's reference runs by it. It holds
everything that changes the law of a sample's tokens: the models (the drafter only where the method uses
one), method and parameters, m (only with a drafter), data and subset, seed, sampling and token budget.
How the run is executed (the hf engine, batch size, threads, paired timing, limit, shard) is not part of it: a
run may be resumed any of those ways, and its manifest records which. The models' precision is the resolved
one (`dtype: auto` is float32 on a CPU and bfloat16 on CUDA): `auto` and `float32` on a CPU are one run, and a
CPU run continued on a GPU is another. A local model is its content, an embedded pair its recipe
(`fingerprint.py`): new weights written to the same folder make another run. A stored run's config keeps
what it resolved to (`resolved`), so it has the same identity read on any machine.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cactus_bench.app.fingerprint import weights_of
from cactus_bench.app.schema import CONF_DIR
from cactus_bench.core.decode.api import backend
from cactus_bench.core.methods import BASELINE, Method
from cactus_bench.core.precision import resolved_dtypes
from cactus_bench.core.utils import path_part_problem

# the method of each reference run relative metrics compare with (metrics.REFERENCES): SpS, the verifier alone
REFERENCE_METHODS = {"sps": "sps", "baseline": BASELINE}
DEFAULT_BACKEND = "hf"


def _hash(value: Any, n: int) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class RunIdentity:
    verifier: dict  # verifier, dtype, revision (and add_bos_token when set)
    drafter: dict | None  # model and dtype; None for the verifier alone
    method: str
    params: dict
    m: int | None  # None for the verifier alone
    data: str
    subset: str | None
    seed: int
    sampling: dict
    max_gen_toks: int
    # a backend whose tokens follow another law or stream than the transformers engine's (vllm), with its
    # settings that change the law; None: the default backend (left out of the key, so its keys never change)
    engine: dict | None = None
    # where the run is filed (names, not identity); the verifier alone is filed under its own pair name
    pair_name: str = field(default="", compare=False)
    data_label: str = field(default="", compare=False)
    baseline_pair_name: str = field(default="", compare=False)

    @classmethod
    def of(cls, cfg: DictConfig | dict) -> RunIdentity:
        """The identity of a composed config, or of a stored run's `config.yaml` (read as a dict)."""
        if not isinstance(cfg, DictConfig):
            cfg = OmegaConf.create(cfg)
        method = Method(cfg.method.name, OmegaConf.to_container(cfg.method.params, resolve=True) or {}, cfg.m)
        p = cfg.pair
        stored = dict(cfg.get("resolved") or {})  # what a stored run resolved to when it ran
        dtypes = resolved_dtypes(p) | stored
        verifier = {"verifier": p.verifier, "dtype": dtypes["verifier_dtype"], "revision": p.revision}
        if p.get("add_bos_token"):
            verifier["add_bos_token"] = True
        drafter = {"model": p.drafter, "dtype": dtypes["drafter_dtype"]}
        for role, node, name in (("verifier", verifier, p.verifier), ("drafter", drafter, p.drafter)):
            weights = stored[f"{role}_weights"] if f"{role}_weights" in stored else weights_of(name)
            if weights is not None and (role == "verifier" or method.uses_drafter):
                node["weights"] = weights
        return cls(
            verifier=verifier,
            drafter=drafter if method.uses_drafter else None,
            method=method.name,
            params=dict(method.params),
            m=cfg.m if method.uses_drafter else None,
            data=cfg.data.name,
            subset=cfg.data.get("subset"),
            seed=cfg.seed,
            sampling=sampling_law(OmegaConf.to_container(cfg.sampling, resolve=True)),
            max_gen_toks=cfg.max_gen_toks,
            engine=engine_identity(cfg.get("engine")),
            pair_name=pair_label(p, method.uses_drafter),
            data_label=cfg.data.get("label") or cfg.data.name,
            baseline_pair_name=pair_label(p, False),
        )

    @property
    def resolved(self) -> dict:
        """What this identity resolved on this machine, stored with the run (its config's `resolved`) so that
        reading it anywhere gives the same identity: each model's dtype and weights fingerprint."""
        out = {"verifier_dtype": self.verifier["dtype"], "verifier_weights": self.verifier.get("weights")}
        if self.drafter is not None:
            out.update(drafter_dtype=self.drafter["dtype"], drafter_weights=self.drafter.get("weights"))
        return out

    def as_dict(self) -> dict:
        out = asdict(self)
        del out["pair_name"], out["data_label"], out["baseline_pair_name"]
        if out["engine"] is None:
            del out["engine"]
        return out

    @property
    def key(self) -> str:
        """The run key: names the run's folder, and is what tables look runs up by."""
        return _hash(self.as_dict(), 10)

    @property
    def model_id(self) -> str:
        """The run as Spec-Bench names a model's answers (`<model_id>.jsonl`): pair, method with its parameters
        and m, and the sampling (`tiny-sps_m4-T0.6-k20-p0.95`, `tiny-ar-greedy`)."""
        s = self.sampling
        sampling = "greedy" if s == GREEDY else f"T{s['temperature']:g}-k{s['top_k']}-p{s['top_p']:g}"
        return f"{self.pair_name}-{Method(self.method, self.params, self.m or 0).run_name}-{sampling}"

    @property
    def setting_key(self) -> str:
        """What every run of one figure shares: the identity without the method, its parameters, m and the
        drafter (the verifier alone has none)."""
        rest = {k: v for k, v in self.as_dict().items() if k not in ("method", "params", "m", "drafter")}
        return _hash(rest, 6)

    @property
    def is_baseline(self) -> bool:
        return self.method == BASELINE

    def reference(self, which: str) -> RunIdentity:
        """The identity of a reference run in this setting: `sps` (Rej) or `baseline` (the verifier
        alone: speedup). The drafter and m are this run's (a baseline has neither)."""
        method = Method(REFERENCE_METHODS[which], {}, self.m or 0)
        return replace(
            self,
            method=method.name,
            params={},
            m=self.m if method.uses_drafter else None,
            drafter=self.drafter if method.uses_drafter else None,
            pair_name=self.pair_name if method.uses_drafter else self.baseline_pair_name,
        )

    @property
    def folder_name(self) -> str:
        return f"{Method(self.method, self.params, self.m or 0).run_name}_s{self.seed}_{self.key}"

    def folder(self, runs: str | Path) -> Path:
        """`<runs>/<data label>/<pair>/<method tag>_m<m>_s<seed>_<key>`, never outside `runs` (`validate`
        refuses such names first, in its own words)."""
        for part in (self.data_label, self.pair_name, self.folder_name):
            problem = path_part_problem(part)
            if problem:
                raise ValueError(f"{part!r} cannot name a run's folder: {problem}")
        return Path(runs) / self.data_label / self.pair_name / self.folder_name


GREEDY = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}


def sampling_law(sampling: dict) -> dict:
    """The sampling settings as the law they give: at temperature 0 every token is the argmax, whatever top-k
    and top-p say, so `sampling.temperature=0` is `sampling=greedy` (it was another run, with another key)."""
    return dict(GREEDY) if float(sampling.get("temperature", 1.0)) == 0.0 else sampling


def _short(model: str) -> str:
    """A model's name for a folder: the last part of a hub id or path, without a .gguf suffix."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(str(model)).name.removesuffix(".gguf"))


def pair_label(pair, uses_drafter: bool) -> str:
    """The name a run is filed under: pair.name, unless it names a stock pair (conf/pair/) whose models these
    are not: then the models' names (the verifier alone: its verifier's), so that overriding pair.drafter or
    pair.verifier never files a run under the stock pair's name."""
    stock = CONF_DIR / "pair" / f"{pair.name}.yaml"
    roles = ("drafter", "verifier") if uses_drafter else ("verifier",)
    if not stock.is_file() or all(pair[r] == OmegaConf.load(stock).get(r) for r in roles):
        return pair.name
    return "+".join(_short(pair[r]) for r in roles)


def engine_identity(engine) -> dict | None:
    """The engine part of an identity: None for the default backend (hf: eager and fast decode the same
    tokens), else the backend and its law-changing settings (their defaults filled in from conf/engine)."""
    if engine is None or engine.get("backend", DEFAULT_BACKEND) == DEFAULT_BACKEND:
        return None
    b = backend(engine.backend)
    settings = OmegaConf.to_container(engine.settings, resolve=True) if engine.get("settings") else {}
    return {"backend": engine.backend, **{k: settings.get(k) for k in b.law_settings}}

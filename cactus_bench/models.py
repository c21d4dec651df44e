"""Loading a drafter/verifier pair (hub id or local folder), and the one builder of random models.

Core module: imports only torch and transformers.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

if TYPE_CHECKING:
    from transformers import PretrainedConfig

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}

# Strings that exercise the tokenizer: words, numbers, code, unicode, whitespace runs, chat markup.
_PROBE_TEXTS = [
    "The quick brown fox jumps over the lazy dog. 1234567890 + 3.14159 = ?",
    "def f(x):\n    return x ** 2  # squares\n\n\tTabs and   spaces",
    "Naïve café — 東京 🚀 Straße ½ ∑ π",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "Question: Natalia sold clips to 48 of her friends in April. #### 72",
]


@dataclass
class Pair:
    drafter: torch.nn.Module
    verifier: torch.nn.Module
    tokenizer: object  # the verifier's tokenizer (identical to the drafter's, checked)
    drafter_id: str
    verifier_id: str

    @property
    def vocab_size(self) -> int:
        """The ids both loops sample from: the tokenizer's. Embedding matrices are often padded past it (Qwen3:
        151,936 rows for 151,669 tokens), differently in drafter and verifier; padded rows are no tokens, so
        speculative decoding and the verifier alone both leave them out (`check_vocab` keeps the tokenizer
        inside both models)."""
        return len(self.tokenizer)

    @property
    def tokenizer_name(self) -> str:
        """The name lm-eval files chat-templated prompts under."""
        return self.verifier_id.replace("/", "__")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    @property
    def eos_token_id(self) -> list[int]:
        ids = self.verifier.generation_config.eos_token_id
        if ids is None:
            ids = self.tokenizer.eos_token_id
        if ids is None:
            return []
        return [ids] if isinstance(ids, int) else list(ids)


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


def _is_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or os.sep in name and Path(name).expanduser().exists()


class PairUnavailable(OSError):
    """A drafter or verifier that cannot be found here: the message names each and what to do."""


def check_available(models: dict[str, str], revision: str | None = None) -> None:
    """Every model of the pair is a local folder or (offline) in the hub cache, before any of them loads:
    one message names every missing model."""
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    missing = []
    for role, name in models.items():
        if _is_local(name) or name.startswith((".", "/", "~")):
            if not Path(name).expanduser().is_dir():
                missing.append(f"pair.{role}={name} is not a folder")
        elif offline:
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str):
                missing.append(f"pair.{role}={name} is not in the local hub cache (HF_HUB_OFFLINE=1)")
    if missing:
        raise PairUnavailable(
            "; ".join(missing) + ". Download the models on a machine with internet (`huggingface-cli download "
            "<id>`) and copy the cache, point pair.drafter / pair.verifier at local folders, or use pair=tiny "
            "(the embedded offline pair)."
        )


# Quantised checkpoints and what running them needs besides torch and transformers (the `gpu` extra).
QUANTISED = {
    "fp8": (
        "kernels",
        "transformers runs FP8 layers with fine-grained FP8 kernels that the `kernels` package fetches from the "
        "hub at first use, on a Hopper or Ada GPU",
    )
}


def check_quantisation(role: str, name: str, config, device: str) -> None:
    """A quantised checkpoint's runtime needs, before any weight loads: the missing package named."""
    q = getattr(config, "quantization_config", None)
    method = q.get("quant_method") if isinstance(q, dict) else getattr(q, "quant_method", None)
    if str(method) not in QUANTISED:
        return
    package, why = QUANTISED[str(method)]
    if not device.startswith("cuda"):
        raise PairUnavailable(f"pair.{role}={name} is an {method} checkpoint: {why}; this run is on {device}.")
    if importlib.util.find_spec(package) is None:
        raise PairUnavailable(
            f"pair.{role}={name} is an {method} checkpoint: {why}, and `{package}` is not installed. Install the "
            f"GPU extra (`pip install 'cactus-bench[gpu]'`), or use the bf16 weights (e.g. pair.{role}=Qwen/Qwen3-32B)."
        )


def _load(kind: str, name: str, loader, **kwargs):
    """Load from a local folder or the hub, turning the usual failures into actionable errors."""
    path = Path(name).expanduser()
    if _is_local(name):
        if not path.is_dir():
            raise FileNotFoundError(f"{kind} folder {name!r} does not exist")
        return loader(str(path), **kwargs)
    try:
        return loader(name, **kwargs)
    except OSError as e:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        raise OSError(
            f"could not load {kind} {name!r} from the Hugging Face hub"
            + (" (HF_HUB_OFFLINE=1)" if offline else " (hub unreachable?)")
            + " and it is not in the local cache. Download it on a machine with internet "
            "(`huggingface-cli download <id>`) or point the config at a local folder "
            f"(e.g. pair.verifier=/path/to/model). Original error: {e}"
        ) from e


def check_tokenizers(tok_d, tok_v, drafter_id: str, verifier_id: str) -> None:
    """The two tokenizers must encode identically; otherwise draft ids mean different strings."""
    for text in _PROBE_TEXTS:
        a = tok_d(text, add_special_tokens=False)["input_ids"]
        b = tok_v(text, add_special_tokens=False)["input_ids"]
        if a != b:
            raise ValueError(
                f"drafter {drafter_id!r} and verifier {verifier_id!r} tokenize differently (e.g. {text[:40]!r}: "
                f"{a[:8]}... vs {b[:8]}...): speculative decoding needs one shared tokenizer"
            )
    if tok_d.eos_token_id != tok_v.eos_token_id:
        raise ValueError(
            f"drafter {drafter_id!r} and verifier {verifier_id!r} have different EOS tokens "
            f"({tok_d.eos_token_id} vs {tok_v.eos_token_id})"
        )


def check_vocab(drafter, verifier, tokenizer, drafter_id: str, verifier_id: str) -> None:
    """Embedding matrices may be padded to different sizes; the tokenizer must fit inside both."""
    vd, vv = drafter.config.vocab_size, verifier.config.vocab_size
    if len(tokenizer) > min(vd, vv):
        raise ValueError(
            f"tokenizer has {len(tokenizer)} tokens but drafter {drafter_id!r} has {vd} and verifier "
            f"{verifier_id!r} has {vv} embedding rows: the models do not share this vocabulary"
        )


def model_bytes(config, dtype: torch.dtype) -> int:
    """Weight bytes of a model built from `config` in `dtype`, counted on the meta device (no memory)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters()) * torch.finfo(dtype).bits // 8


def free_bytes(device: str) -> int | None:
    """Memory free for weights on `device` (CUDA: the card's free memory; CPU: available RAM)."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that reports it
        return None


def check_fits(kind: str, name: str, config, dtype: torch.dtype, device: str, budget: int | None) -> int:
    """Fail before loading when the weights alone cannot fit (10% headroom for activations and caches)."""
    need = model_bytes(config, dtype)
    if budget is not None and need * 1.1 > budget:
        raise MemoryError(
            f"{kind} {name!r} needs ~{need / 2**30:.1f} GiB of weights in {str(dtype).replace('torch.', '')} but "
            f"{device} has ~{budget / 2**30:.1f} GiB free: use a smaller pair or dtype, or spread the verifier "
            "over several GPUs (pair.verifier_device_map=auto)"
        )
    return need


def load_pair(
    drafter: str,
    verifier: str,
    *,
    dtype: str | torch.dtype = "auto",
    device: str = "auto",
    verifier_device_map: str | dict | None = None,
    revision: str | None = None,
) -> Pair:
    """Load drafter and verifier (hub ids or local folders) and check they can decode together.

    Tokenizers are compared, and the weights' size checked against free memory, before the (expensive)
    weights load. `verifier_device_map` (e.g. "auto") spreads a verifier that does not fit one GPU.
    """
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    tok_d = _load("drafter tokenizer", drafter, AutoTokenizer.from_pretrained, revision=revision)
    tok_v = _load("verifier tokenizer", verifier, AutoTokenizer.from_pretrained, revision=revision)
    check_tokenizers(tok_d, tok_v, drafter, verifier)
    budget = free_bytes(device)
    cfg_d = _load("drafter config", drafter, AutoConfig.from_pretrained, revision=revision)
    budget = None if budget is None else budget - check_fits("drafter", drafter, cfg_d, torch_dtype, device, budget)
    cfg_v = _load("verifier config", verifier, AutoConfig.from_pretrained, revision=revision)
    for role, name, config in (("drafter", drafter, cfg_d), ("verifier", verifier, cfg_v)):
        check_quantisation(role, name, config, device)
    if verifier_device_map is None:  # a device map spreads the verifier: accelerate plans that itself
        check_fits("verifier", verifier, cfg_v, torch_dtype, device, budget)
    d_model = (
        _load("drafter", drafter, AutoModelForCausalLM.from_pretrained, dtype=torch_dtype, revision=revision)
        .to(device)
        .eval()
    )
    v_kwargs = {"dtype": torch_dtype, "revision": revision}
    if verifier_device_map is not None:
        v_kwargs["device_map"] = verifier_device_map
    v_model = _load("verifier", verifier, AutoModelForCausalLM.from_pretrained, **v_kwargs)
    if verifier_device_map is None:
        v_model = v_model.to(device)
    v_model.eval()
    check_vocab(d_model, v_model, tok_v, drafter, verifier)
    return Pair(d_model, v_model, tok_v, drafter, verifier)


# --- random models (tests, benchmarks, the embedded pair's initialisation, the device check) -------------


def random_lm(
    config: PretrainedConfig | str,
    seed: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    logit_scale: float = 1.0,
    **shape,
):
    """A random-initialised causal LM, built in memory (no download), in eval mode: from a config, or from an
    architecture name (`qwen3`, `gemma2`, `llama`, ...) and its shape (config keyword arguments).

    `logit_scale` multiplies the LM head, so a random model's next-token distributions are peaked rather
    than near-uniform (a near-uniform pair makes every statistical test powerless)."""
    if isinstance(config, str):
        config = AutoConfig.for_model(config, **shape)
    torch.manual_seed(seed)
    with torch.device(device or "cpu"):
        model = AutoModelForCausalLM.from_config(config)
    if logit_scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(logit_scale)
    return model.to(dtype).eval()

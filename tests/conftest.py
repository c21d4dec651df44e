import os
import sys
from pathlib import Path

# Offline by construction: hub ids fail at once instead of retrying for ~30 s; wandb never phones home.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).parent))  # test helpers (reference_laws, stats)

import copy  # noqa: E402

import pytest  # noqa: E402

from cactus_bench.embedded.build import SPEC, ensure_pair  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"  # ../shared/data beside the checkout
os.environ.setdefault("CACTUS_BENCH_DATA", str(DATA))
os.environ.setdefault("NLTK_DATA", str(DATA / "nltk_data"))

# An embedded-pair recipe small enough to train in seconds: the same code path as the real build.
SMALL_SPEC = copy.deepcopy(SPEC)
SMALL_SPEC["verifier"].update(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, steps=15, batch=8)
SMALL_SPEC["drafter"].update(hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, steps=10, batch=8)
SMALL_SPEC["eval"].update(items=8, accept_prompts=2, max_new_tokens=12)


@pytest.fixture(scope="session")
def small_pair_dir(tmp_path_factory):
    """A tiny trained pair (drafter/, verifier/ folders), built once per test session."""
    return ensure_pair(tmp_path_factory.mktemp("pair-cache"), spec=SMALL_SPEC, log=lambda s: None)

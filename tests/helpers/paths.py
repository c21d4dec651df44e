"""Where the shared data lives, and an embedded-pair recipe small enough to train in seconds."""

import copy
from pathlib import Path

from cactus_bench.adapters.embedded.recipes import SPEC

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"  # ../shared/data beside the checkout

# The same code path as the real embedded build, at a size that trains in seconds.
SMALL_SPEC = copy.deepcopy(SPEC)
SMALL_SPEC["verifier"].update(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, steps=15, batch=8)
SMALL_SPEC["drafter"].update(hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, steps=10, batch=8)
SMALL_SPEC["eval"].update(items=8, accept_prompts=2, max_new_tokens=12)

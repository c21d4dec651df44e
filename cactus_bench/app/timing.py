"""Speedups from paired timing: an item decoded by the method and by the verifier alone back to back, at
batch size 1, under recorded conditions.

With `paired_timing=true` every item is timed as it is decoded (batch size 1, the authors' way, on a
shared machine). With `timing_sample=N` a run decodes its items in batches (scores, AL, Rej, KL do not
depend on timing) and then times N of them, chosen by a seeded draw stratified by prompt length, so the
speedup costs N paired decodes instead of the whole dataset at batch size 1. Either way each timing is one
line of the run's `timing.jsonl` with the conditions it was taken under (host, device, threads, batch size,
load); readers join it to its sample. A resume under other conditions re-times the items of the sample,
so one run's timings never mix two machines or a quiet and a busy one.
"""

from __future__ import annotations

import logging
import random
import socket
import time
from collections.abc import Iterator
from typing import Any

import torch

from cactus_bench.core import metrics
from cactus_bench.core.metrics.timing_conditions import condition_class, load_per_core

log = logging.getLogger("cactus_bench")
# what a paired decode adds to its sample (`decode.api.PairedGroup`), kept in timing.jsonl
PAIRED = ("paired_baseline_first", "paired_methods", *(k for k in metrics.COUNTERS if k.startswith("paired_")))


def conditions(device: str, batch_size) -> dict:
    """What a decode was timed under."""
    return {
        "host": socket.gethostname(),
        "device": device,
        "threads": torch.get_num_threads(),
        "batch_size": batch_size,
        "load": round(load_per_core(), 2),
    }


def split_timing(record: dict) -> dict | None:
    """Take the paired times out of a sample record (they go to timing.jsonl); None if it has none."""
    stats = record["stats"]
    if stats.get("paired_method_time") is None:
        return None
    return {k: stats.pop(k) for k in PAIRED if k in stats}


def timing_record(index, paired: dict, where: dict, same_tokens: bool | None = None) -> dict:
    stats = dict(paired)
    if same_tokens is not None:
        stats["paired_same_tokens"] = same_tokens  # the re-decoded item gave the stored tokens
    return {"index": index, "stats": stats, "conditions": where, "timed_at": time.time()}


def choose(items: list, key, order, n: int, seed: int) -> list:
    """N items by a seeded draw stratified by prompt length: the items sorted by `order` (the benchmark's:
    prompt length, or category then length), cut into N strata of (nearly) equal count, one drawn from
    each; all of them when there are no more than N."""
    if n >= len(items):
        return list(items)
    ranked = sorted(items, key=lambda it: (order(it), str(key(it))))
    rng = random.Random(f"timing-sample:{seed}:{n}")
    bounds = [round(i * len(ranked) / n) for i in range(n + 1)]
    return [ranked[rng.randrange(lo, hi)] for lo, hi in zip(bounds, bounds[1:])]


def to_time(chosen: list, key, timings: dict, here: dict) -> list:
    """The chosen items that lack a timing taken under today's conditions (new, or a resume elsewhere)."""
    now = condition_class(here)
    return [it for it in chosen if key(it) not in timings or condition_class(timings[key(it)]["conditions"]) != now]


def time_items(bench, decoder, items: list, stored: dict[Any, dict], here: dict) -> Iterator[dict]:
    """Decode each item again with the paired decoder (batch size 1) and yield its timing record."""
    for record in bench.decode(decoder, items):
        paired = split_timing(record)
        before = stored.get(record["index"], {}).get("tokens")
        same = None if before is None or "tokens" not in record else record["tokens"] == before
        yield timing_record(record["index"], paired, here, same)

"""Hooks for the project's lm-eval task YAMLs: dataset loading (local folder or hub) and IFEval scoring.

The metric code is lm-eval's own; only data loading is ours (so tasks read ../shared/data offline). The
`custom_dataset` hook receives the task's `dataset_kwargs` (which loader, its options) and the
TaskManager's metadata (`data_root`: None means the hub).
"""

import json
import os
import random
from pathlib import Path

from lm_eval.api import samplers

from cactus_bench.adapters.benchmarks import data


def load(dataset, data_root=None, **options):
    """Every task's `custom_dataset`: the loader registered for `dataset_kwargs.dataset`."""
    return data.LOADERS.get(dataset)(data_root, **options)


def _ifeval_utils():
    """lm-eval's IFEval checkers, imported on first use: the import tries to download nltk's punkt_tab
    unless NLTK_DATA has it, so point NLTK_DATA at <data root>/nltk_data when the caller has not."""
    if "NLTK_DATA" not in os.environ and os.environ.get("CACTUS_BENCH_DATA"):
        candidate = Path(os.environ["CACTUS_BENCH_DATA"]) / "nltk_data"
        if candidate.is_dir():
            os.environ["NLTK_DATA"] = str(candidate)
    from langdetect import DetectorFactory
    from lm_eval.tasks.ifeval import utils

    DetectorFactory.seed = 0  # the language checker (langdetect) is random unless seeded: reproducible scores
    return utils


def ifeval_process_results(doc, results):
    """lm-eval's IFEval scoring, on the kwargs stored as JSON text by our loader.

    Some upstream checkers draw from Python's global `random` when an argument is outside their range
    (letter_frequency with letter '#' or '!' picks a random letter), so a score could change between
    runs: seed it per prompt, and put the caller's random state back afterwards."""
    state = random.getstate()
    random.seed(f"ifeval:{doc['key']}")
    try:
        return _ifeval_utils().process_results({**doc, "kwargs": json.loads(doc["kwargs"])}, results)
    finally:
        random.setstate(state)


def agg_inst_level_acc(items):
    return _ifeval_utils().agg_inst_level_acc(items)


class TwiceDrawnSampler(samplers.ContextSampler):
    """The authors' few-shot draws. Their pinned lm-eval (e4a7b69) builds a single-turn chat prompt with
    `get_chat_context`, which draws the exemplars once and throws them away, then calls `get_context`, which
    draws again and uses those: document k shows the second of two draws from the seeded generator per
    document. lm-eval 0.4.13 draws once; this sampler consumes the same draws as theirs."""

    def sample(self, n, eval_doc=None, df=None, **kwargs):
        super().sample(n, eval_doc, df, **kwargs)  # get_chat_context's draw, unused
        return super().sample(n, eval_doc, df, **kwargs)

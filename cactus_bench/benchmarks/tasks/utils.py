"""Hooks for the project's lm-eval task YAMLs: dataset loaders (local folder or hub) and IFEval scoring.

The metric code is lm-eval's own; only data loading is ours (so tasks read ../shared/data offline).
`custom_dataset` hooks receive the TaskManager's metadata: `data_root` (None: the hub), `gpqa_subset`.
"""

import json

from lm_eval.tasks.ifeval.utils import agg_inst_level_acc  # noqa: F401  (referenced by the IFEval YAML)
from lm_eval.tasks.ifeval.utils import process_results as _ifeval_process_results

from cactus_bench.benchmarks import data


def gsm8k(data_root=None, **_):
    return data.load_gsm8k(data_root)


def ifeval(data_root=None, **_):
    return data.load_ifeval(data_root)


def gpqa_diamond(data_root=None, **_):
    return data.load_gpqa(data_root, "diamond")


def gpqa_main(data_root=None, **_):
    return data.load_gpqa(data_root, "main")


def gpqa_extended(data_root=None, **_):
    return data.load_gpqa(data_root, "extended")


def arith(arith_seed=0, **_):
    return data.load_arith(arith_seed)


def ifeval_process_results(doc, results):
    """lm-eval's IFEval scoring, on the kwargs stored as JSON text by our loader."""
    return _ifeval_process_results({**doc, "kwargs": json.loads(doc["kwargs"])}, results)

"""lm-eval as the scorer: the project's task YAMLs loaded without lm-eval's slow index, requests built by
lm-eval (prompts, few-shot, chat template), and each response scored by the task's own filters and
metrics the moment it is generated — so per-sample scores can be appended as a run goes, and stored
responses re-scored later on any machine.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from lm_eval.api.metrics import mean, stderr_for_metric
from lm_eval.tasks import TaskManager

from cactus_bench.adapters.benchmarks import filters  # noqa: F401  (registers the authors' filters the task YAMLs name)
from cactus_bench.adapters.benchmarks.data import DataError

TASKS_DIR = Path(__file__).parent / "tasks"
TASKS_GROUP = "cactus_bench.tasks"  # entry points naming a package whose folder holds more task YAMLs
FEWSHOT_SEED = 1234  # the authors' fewshot_random_seed, set on every task (spec.py)
FEWSHOT_AS_MULTITURN = False  # lm-eval's default layout, which the authors use: exemplars + question in one turn
BOOTSTRAP_ITERS = 1000  # only for aggregations without a closed-form stderr (IFEval's instruction level)


def task_dirs() -> list[Path]:
    """Where lm-eval finds the project's tasks: benchmarks/tasks/, then the folder of each package an
    installed distribution names under the `cactus_bench.tasks` entry-point group (a dataset from outside)."""
    return [TASKS_DIR, *(Path(ep.load().__file__).parent for ep in entry_points(group=TASKS_GROUP))]


@dataclass
class Prompt:
    """One generation request: the chat-formatted context, its stop strings, and the doc it scores."""

    index: int  # lm-eval doc index (order of the test split)
    id: str | int  # the dataset's own key
    context: str
    until: list[str]
    doc: dict


def _plain(value):
    """numpy scalars and bools -> JSON-friendly Python values (lists kept: IFEval's per instruction)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    return float(value) if isinstance(value, bool) else value


def use_nltk_data(data_root) -> None:
    """IFEval's checkers need nltk's punkt_tab and try to download it when NLTK_DATA lacks it (offline that
    fails after an item is decoded, and loses it): a data folder's own copy (<root>/nltk_data) is used,
    however the folder was chosen (data.root, paths.data, CACTUS_BENCH_DATA or the offline fallback)."""
    if data_root and "NLTK_DATA" not in os.environ and (Path(data_root) / "nltk_data").is_dir():
        os.environ["NLTK_DATA"] = str(Path(data_root) / "nltk_data")


def refuse_missing_nltk_data(task: str, resources: list[str]) -> None:
    """A task's scorer that needs NLTK data (its `metadata.nltk_data`) is refused before any item decodes when
    the data is not here (offline, lm-eval's download fails at the first item that needs it, and says it
    downloaded)."""
    if not resources:
        return
    import nltk

    missing = []
    for resource in resources:
        try:
            nltk.data.find(resource)
        except LookupError:
            missing.append(resource)
    if missing:
        raise DataError(
            f"{task}'s scorer needs NLTK's {', '.join(missing)}, which is not under NLTK_DATA "
            f"({os.environ.get('NLTK_DATA', 'unset')}) nor NLTK's own folders. Point NLTK_DATA at a folder that "
            "holds it (the data folder's nltk_data/, as ../shared/data has), or fetch it where there is network: "
            f"python -m nltk.downloader {' '.join(r.split('/')[-1] for r in missing)}"
        )


class TaskScorer:
    """One lm-eval task of ours (`tasks/*.yaml`): its prompts and its scoring of responses.
    `primary_metric` ("metric,filter") is the headline score (conf/data/<name>.yaml)."""

    def __init__(
        self,
        task: str,
        primary_metric: str,
        data_root: str | None = None,
        chat_template: Callable | None = None,
        tokenizer_name: str = "",
    ):
        use_nltk_data(data_root)
        manager = TaskManager(
            include_path=task_dirs(),
            include_defaults=False,
            metadata={"data_root": str(data_root) if data_root else None},
        )
        if task not in manager.all_tasks:
            raise DataError(
                f"unknown lm-eval task {task!r}; the project's tasks (benchmarks/tasks/*.yaml and the "
                f"`{TASKS_GROUP}` entry points): "
                f"{', '.join(t for t in manager.all_tasks if not t.startswith('_'))}"
            )
        self.name = task
        self.primary_metric = primary_metric
        lm_eval_logger = logging.getLogger("lm_eval")
        level = lm_eval_logger.level
        lm_eval_logger.setLevel(logging.ERROR)  # its custom_dataset notice is noise here
        try:
            self.task = manager.load([self.name])["tasks"][self.name]
        finally:
            lm_eval_logger.setLevel(level)
        refuse_missing_nltk_data(task, (self.task.config.metadata or {}).get("nltk_data") or [])
        self.chat_template = chat_template
        self.tokenizer_name = tokenizer_name
        self._instances = None

    def _build(self, limit: int | None = None):
        # Re-seeded for every build: the same exemplars in every process, method and resume, and the first
        # N prompts do not depend on N (the sampler draws for the documents in order).
        self.task.set_fewshot_seed(seed=FEWSHOT_SEED)
        # its "Building contexts" bar, a page of carriage returns between runs, says nothing a run's own
        # progress does not (its log records go to their handlers, not this stream)
        with contextlib.redirect_stderr(io.StringIO()):
            self._build_requests(limit)
        self._instances = {inst.doc_id: inst for inst in self.task.instances}
        return self._instances

    def _build_requests(self, limit: int | None) -> None:
        self.task.build_all_requests(
            limit=limit,
            rank=0,
            world_size=1,
            apply_chat_template=self.chat_template is not None,
            fewshot_as_multiturn=FEWSHOT_AS_MULTITURN,
            chat_template=self.chat_template,
            tokenizer_name=self.tokenizer_name,
        )

    def prompts(self, limit: int | None = None) -> list[Prompt]:
        """The first `limit` prompts (all when None), with the chat template applied when one was given."""
        if limit is not None and limit <= 0:
            raise DataError(f"limit must be a positive number of items; got {limit}")
        out = []
        for idx, inst in sorted(self._build(limit).items()):
            context, gen_kwargs = inst.args
            out.append(Prompt(idx, inst.doc["id"], context, list(gen_kwargs.get("until", [])), inst.doc))
        return out

    def score(self, prompt_index: int, response: str) -> dict[str, float]:
        """Score one response with the task's filters and metrics: {"metric,filter": value}."""
        if self._instances is None:
            self._build()
        inst = self._instances[prompt_index]
        inst.resps = [response]
        inst.filtered_resps = {}
        for ensemble in self.task._filters:
            ensemble.apply([inst])
        scores = {}
        for filter_key, filtered in inst.filtered_resps.items():
            for metric, value in self.task.process_results(inst.doc, [filtered]).items():
                scores[f"{metric},{filter_key}"] = _plain(value)
        return scores

    def aggregate(self, per_sample: list[dict]) -> dict[str, float]:
        """lm-eval's aggregation and standard error of each metric over the scored samples."""
        by_key = defaultdict(list)
        for scores in per_sample:
            for key, value in scores.items():
                by_key[key].append(value)
        aggregation = self.task.aggregation()
        out = {}
        for key, values in by_key.items():
            metric = key.split(",")[0]
            agg = aggregation.get(metric, mean)
            out[key] = float(agg(values))
            stderr = stderr_for_metric(metric=agg, bootstrap_iters=BOOTSTRAP_ITERS)
            out[key.replace(",", "_stderr,", 1)] = float(stderr(values)) if stderr and len(values) > 1 else None
        return out

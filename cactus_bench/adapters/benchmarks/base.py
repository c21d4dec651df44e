"""What a run needs from a benchmark, whatever it measures: its items, each item's key, how to decode items
into sample records, and how to summarise them. `app.run` is one loop over this protocol.

Benchmark kinds are registered in `KINDS` (name -> `Kind`); `conf/data/<name>.yaml` picks the kind and
holds the dataset's facts (lm-eval task, primary metric, label). A kind builds its benchmark lazily (its
adapters import lm-eval or `datasets`), and tells the reports what a table cell of its runs holds and
which figures it draws, so reports never branch on the kind themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cactus_bench.core import metrics
from cactus_bench.core.registry import Registry

log = logging.getLogger("cactus_bench")
SPEEDUP_COLUMNS = {  # Spec-Bench's speedups against the verifier alone's run, each named for how it counts
    "speedup": "speedup (ratio of mean speeds, generated ids)",
    "speedup_specbench": "speedup (speed.py: the baseline's text re-tokenised)",
    "speedup_mean_of_ratios": "speedup (mean of per-question ratios)",
}

if TYPE_CHECKING:
    from cactus_bench.core.decode import Decoder


class Benchmark(Protocol):
    def prepare(self, decoder: Decoder, model_id: str) -> None:
        """Bind to the run's decoder before items are built (prompts use its chat template); `model_id`
        names pair and method where a benchmark's own files want it."""

    def items(self, limit: int | None) -> list[Any]:
        """The first `limit` items (all when None), in a fixed order."""

    def key(self, item: Any) -> int | str:
        """The item's index in the store (stable across runs and processes), ascending in item order: the
        first `limit` items are the `limit` smallest keys (a table of that limit reads them so)."""

    def order(self, item: Any) -> Any:
        """What a timing sample is stratified by (prompt length; Spec-Bench: category, then length)."""

    def decode(self, decoder: Decoder, items: list[Any]) -> Iterator[dict]:
        """Decode the items; yield each one's sample record (`index`, `id`, `stats`, ...) as it finishes."""

    def summarise(self, samples: list[dict]) -> dict:
        """The benchmark's own summary entries (e.g. task scores) over finished samples."""

    def artifacts(self, samples: list[dict]) -> dict[str, str]:
        """Extra files to write beside the run's samples at the end (file name -> text)."""


Cells = dict[str | None, dict[str, Any]]  # table group (None: the dataset itself) -> metric -> value


@dataclass(frozen=True)
class Kind:
    """A kind of benchmark. `make(data)` builds one (importing its adapters only then); `cells(run, sps, ar)`
    gives what a table shows for a stored run against its reference runs (SpS, the verifier alone; either
    may be None), by group; `summary(samples, data)` recomputes a run's summary over some of its samples
    (a table over the items every run shares) without lm-eval; `relative` what its stored summary adds against
    the reference runs; `figures` names the report's figure
    families drawn from such runs; `labels` renames metrics where the kind defines them its own way;
    `one_request` says each item is one request, the same whatever the method (a sweep can then time its
    methods on it together: `app.together`)."""

    make: Callable[[Any], Benchmark]
    cells: Callable[[Any, Any, Any], Cells]
    summary: Callable[[list[dict], dict], dict]
    figures: tuple[str, ...]
    labels: dict[str, str]
    one_request: bool = True
    # what a run's summary adds against its reference runs' samples (`relative(samples, refs, pair)`, refs:
    # {"sps", "baseline"} -> samples or None) beyond the metrics' own relative readings
    relative: Callable[[list[dict], dict, Any], dict] | None = None


def one_request_per_item(data) -> bool:
    """Whether a `data` config's items are each one request that every method decodes alike."""
    return KINDS.get(data.kind).one_request


KINDS: Registry[Kind] = Registry("benchmark kind", group="cactus_bench.benchmarks")


def _task(data) -> Benchmark:
    from cactus_bench.adapters.benchmarks.task import TaskBenchmark

    return TaskBenchmark(data)


def task_cells(run, sps, ar) -> Cells:
    """Every metric of a run's summary, and the relative ones against its reference runs."""
    s = run.summary
    out = {m.name: s.get(m.name) for m in metrics.METRICS.values() if m.relative is None}
    for m in metrics.METRICS.values():
        if m.positional:
            out.update(metrics.position_entries(m, s))
        elif m.sampled or m.ratio:
            out.update({f"{m.name}_ci": s.get(f"{m.name}_ci"), f"{m.name}_n": s.get(f"{m.name}_n")})
    out["score_stderr"] = s.get("score_stderr")
    out["n"] = s.get("samples")
    if run.is_baseline:
        out.update(accepted_length=None, tau=1.0)
        return {None: out}
    refs = {"sps": sps.samples if sps is not None else None, "baseline": ar.samples if ar is not None else None}
    for m in metrics.METRICS.values():
        if m.relative is None and not m.timed:
            continue
        reading = metrics.read(m, run.samples, refs)
        if m.relative is not None or reading.withheld:
            out.update(metrics.flatten(m.name, reading.value))
        if reading.caveat is not None:
            out[f"{m.name}_caveat"] = (reading.withheld, reading.caveat)
    return {None: out}


def task_summary(samples: list[dict], data: dict) -> dict:
    """Decode metrics and the headline score over these samples: the primary metric is a mean (exact match,
    prompt-level accuracy), so its value and standard error are lm-eval's (sample deviation / sqrt n)."""
    key = data["primary_metric"]
    values = [s["scores"][key] for s in samples if key in s.get("scores", {})]
    n = len(values)
    mean = sum(values) / n if n else None
    stderr = (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5 if n > 1 else None
    every = set.intersection(*(set(s.get("scores", {})) for s in samples)) if samples else set()
    return {
        **metrics.decode_metrics(samples),
        "scores": {k: sum(float(s["scores"][k]) for s in samples) / n for k in sorted(every)},  # every metric's mean
        "score": None if mean is None else 100 * mean,
        "score_stderr": None if stderr is None else 100 * stderr,
    }


def _specbench(data) -> Benchmark:
    from cactus_bench.adapters.benchmarks.specbench import SpecBenchBenchmark

    return SpecBenchBenchmark(data)


def specbench_cells(run, sps, ar) -> Cells:
    """Spec-Bench's per-category speed metrics (`specbench.speed_metrics`); the verifier alone is 1×."""
    from cactus_bench.adapters.benchmarks.specbench import speed_metrics

    count = _speed_py_count(ar.config["pair"]) if ar is not None else None
    table: Cells = speed_metrics(run.samples, ar.samples if ar is not None else None, count, SPEEDUP_COLUMNS)
    for values in table.values():
        values["n"] = values["questions"]
        if run.is_baseline:
            values["speedup"] = 1.0
    return table


def _speed_py_count(pair):
    """speed.py's token count (the verifier's tokenizer), or None where that tokenizer is not here."""
    from cactus_bench.adapters.benchmarks.specbench import verifier_count

    try:
        return verifier_count(pair["verifier"], pair.get("revision"))
    except (OSError, ValueError) as e:  # no tokenizer here (a hub id offline): that column stays empty
        log.warning("speed.py's speedup not computed: the verifier's tokenizer is not here (%s)", e)
        return None


def specbench_relative(samples: list[dict], refs: dict, pair) -> dict:
    """A Spec-Bench run's stored per-category metrics with its speedups against the stored verifier-alone run:
    this harness's, the mean of ratios and speed.py's (`speedup_specbench`), as the table shows them."""
    from cactus_bench.adapters.benchmarks.specbench import speed_metrics

    baseline = refs.get("baseline")
    if not samples or not baseline:
        return {}
    return {"specbench": speed_metrics(samples, baseline, _speed_py_count(pair), SPEEDUP_COLUMNS)}


def specbench_summary(samples: list[dict], data: dict) -> dict:
    from cactus_bench.adapters.benchmarks.specbench import speed_metrics

    return {**metrics.decode_metrics(samples), "specbench": speed_metrics(samples, None)}


KINDS.add("task", Kind(_task, task_cells, task_summary, ("tradeoff", "delta_grid", "speedup", "positions"), {}))
KINDS.add(
    "specbench",
    Kind(
        _specbench,
        specbench_cells,
        specbench_summary,
        ("specbench_speedup",),
        SPEEDUP_COLUMNS,
        one_request=False,  # a question's second turn follows the method's own first answer; it warms up first
        relative=specbench_relative,
    ),
)


def make_benchmark(data) -> Benchmark:
    """The benchmark a `data` config describes (data errors surface here, before any model loads)."""
    return KINDS.get(data.kind).make(data)

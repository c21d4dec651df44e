"""What a run needs from a benchmark, whatever it measures: its items, each item's key, how to decode and
record one item, and how to summarise the recorded samples. `app.run` is one loop over this protocol.

Benchmark kinds are registered in `KINDS` (name -> factory taking the `data` config); `conf/data/<name>.yaml`
picks the kind and holds the dataset's facts (lm-eval task, primary metric, label). Factories import their
adapters lazily, so choosing or validating a benchmark imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..registry import Registry

if TYPE_CHECKING:
    from .lm import CactusLM


class Benchmark(Protocol):
    def prepare(self, lm: CactusLM, model_id: str) -> None:
        """Bind to the loaded model before items are built (prompts use its chat template); `model_id`
        names pair and method where a benchmark's own files want it."""

    def items(self, limit: int | None) -> list[Any]:
        """The first `limit` items (all when None), in a fixed order."""

    def key(self, item: Any) -> int | str:
        """The item's index in the store (stable across runs and processes)."""

    def run(self, lm: CactusLM, item: Any) -> dict:
        """Decode one item; the sample record stored for it (`index`, `id`, `stats`, ...)."""

    def summarise(self, samples: list[dict]) -> dict:
        """The benchmark's own summary entries (e.g. task scores) over finished samples."""

    def artifacts(self, samples: list[dict]) -> dict[str, str]:
        """Extra files to write beside the run's samples at the end (file name -> text)."""


KINDS: Registry[Callable[[Any], Benchmark]] = Registry("benchmark kind")


@KINDS.register("task")
def _task(data) -> Benchmark:
    from .task import TaskBenchmark

    return TaskBenchmark(data)


@KINDS.register("specbench")
def _specbench(data) -> Benchmark:
    from .specbench import SpecBenchBenchmark

    return SpecBenchBenchmark(data)


def make_benchmark(data) -> Benchmark:
    """The benchmark a `data` config describes (data errors surface here, before any model loads)."""
    return KINDS.get(data.kind)(data)

"""A generation task scored by lm-eval (GSM8K, IFEval, GPQA, arith): prompts built by lm-eval with the
pair's chat template, and each response scored by the task's own filters the moment it is decoded."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cactus_bench.adapters.benchmarks.scoring import Prompt, TaskScorer
from cactus_bench.core.decode import Request

if TYPE_CHECKING:
    from cactus_bench.core.decode import Decoder


class TaskBenchmark:
    def __init__(self, data):
        self.scorer = TaskScorer(data.task, data.primary_metric, data.root)

    def prepare(self, decoder: Decoder, model_id: str) -> None:
        self.scorer.chat_template, self.scorer.tokenizer_name = decoder.apply_chat_template, decoder.tokenizer_name

    def items(self, limit: int | None) -> list[Prompt]:
        return self.scorer.prompts(limit)

    def key(self, item: Prompt) -> int:
        return item.index

    def order(self, item: Prompt) -> int:
        return len(item.context)

    def requests(self, items: list[Prompt]) -> list[Request]:
        """The items as the decoder sees them: prompt text, the key of the item's random stream, its stops."""
        return [Request(item.context, (self.scorer.name, item.index), tuple(item.until)) for item in items]

    def decode(self, decoder: Decoder, items: list[Prompt]) -> Iterator[dict]:
        by_key = {(self.scorer.name, item.index): item for item in items}
        for gen in decoder.generate(self.requests(items)):
            item = by_key[gen.request.key]
            yield {
                "index": item.index,
                "id": item.id,
                "prompt_sha256": hashlib.sha256(item.context.encode()).hexdigest(),
                "response": gen.text,
                "raw_response": gen.raw_text,
                "tokens": gen.output.tokens,
                "stats": gen.stats(),
                "rounds_accepted": gen.output.rounds.accepted,
                **item_scores(self.scorer.score(item.index, gen.text), self.scorer.primary_metric),
                "finished_at": time.time(),
            }

    def summarise(self, samples: list[dict]) -> dict:
        if not samples:
            return {}
        scores = self.scorer.aggregate([s["scores"] for s in samples])
        key = self.scorer.primary_metric
        stderr = scores.get(key.replace(",", "_stderr,", 1))  # None for a single sample
        return {
            "scores": scores,
            "score": 100 * scores[key],
            "score_stderr": None if stderr is None else 100 * stderr,
            "score_metric": key,
        }

    def artifacts(self, samples: list[dict]) -> dict[str, str]:
        return {}


def item_scores(scores: dict, primary: str) -> dict:
    """A sample's scores, and its own headline score in points (`score`: what paired differences compare)."""
    value = scores.get(primary)
    return {"scores": scores, "score": None if value is None else 100 * float(value)}

"""Re-score stored generations with the same lm-eval task code, on any machine (no models, no GPU).

    python -m cactus_bench.score data=ifeval responses=path/to/responses.jsonl

Prints the metrics as one JSON object on its last line and writes them beside the responses. Responses
covering part of the dataset are scored on that part, and the output says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from .app.config import dataset_configs
from .benchmarks.data import DataError
from .benchmarks.scoring import TaskScorer
from .registry import unknown_name_message
from .utils import write_text_atomic


def read_responses(path: Path) -> dict[str, str]:
    """id -> response from a JSONL file (or a run folder's samples.jsonl)."""
    if path.is_dir():
        path = path / "samples.jsonl"
    if not path.is_file():
        raise DataError(f"responses file {str(path)!r} does not exist")
    out = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out[str(row["id"])] = row["response"]
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(f"{path}:{n}: expected a JSON object with 'id' and 'response' ({e})") from None
    return out


def scorer_for(data: str, root: str | None = None) -> TaskScorer:
    """The scorer of a dataset named as in conf/data (`gpqa`, or with its subset: `gpqa_main`)."""
    scored = {k: v for k, v in dataset_configs().items() if v.kind == "task"}
    if data not in scored:
        raise DataError(unknown_name_message("dataset for scoring", data, scored))
    spec = scored[data]
    return TaskScorer(spec.task, spec.primary_metric, root)


def score_responses(data: str, responses: dict[str, str], root: str | None = None) -> dict:
    scorer = scorer_for(data, root)
    prompts = {str(p.id): p for p in scorer.prompts()}
    unknown = sorted(set(responses) - set(prompts))
    if unknown:
        raise DataError(
            f"{len(unknown)} response ids are not {data} ids (e.g. {unknown[:3]}); ids are the "
            "dataset's own keys: IFEval `key`, GPQA `Record ID`, GSM8K test row index"
        )
    per_sample = [scorer.score(prompts[i].index, text) for i, text in responses.items()]
    result = {
        "data": data,
        "task": scorer.name,
        "scored": len(per_sample),
        "dataset_size": len(prompts),
        "partial": len(per_sample) < len(prompts),
        "metrics": scorer.aggregate(per_sample),
        "primary_metric": scorer.primary_metric,
    }
    return result


@hydra.main(version_base="1.3", config_path="../conf/tools", config_name="score")
def main(cfg: DictConfig) -> None:
    try:
        path = Path(cfg.responses)
        result = score_responses(cfg.data, read_responses(path), cfg.root)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if result["partial"]:
        print(f"note: scored {result['scored']} of {result['dataset_size']} {cfg.data} items (partial coverage)")
    out = Path(cfg.output) if cfg.output else (path if path.is_dir() else path.parent) / f"{path.stem}.scores.json"
    write_text_atomic(out, json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

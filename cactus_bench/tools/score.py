"""Re-score stored replies with the same lm-eval task code, on any machine (no models, no GPU).

Prints the metrics as one JSON object on its last line and writes them to `output`. Replies covering part of
the dataset are scored on that part, and the output says so. `responses` is a run folder (every shard's
samples), or a JSONL file with one object per line: {"id": <the dataset's key: GSM8K test row, IFEval `key`,
GPQA `Record ID`>, "response": "<reply>"} (a run's samples.jsonl works as is; its lines also name their
dataset, which is checked).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from cactus_bench.adapters.benchmarks.errors import DataError
from cactus_bench.app.config import dataset_configs
from cactus_bench.app.store import SAMPLES, samples_files
from cactus_bench.core.cli import Command, Key
from cactus_bench.core.registry import unknown_name_message
from cactus_bench.core.utils import write_text_atomic

if TYPE_CHECKING:
    from cactus_bench.adapters.benchmarks.scoring import TaskScorer


def read_responses(path: Path, data: str | None = None) -> dict[str, str]:
    """id -> response from a JSONL file, or from a run folder (every shard's samples). Duplicate ids, an empty
    file, a missing or non-text response, and a run folder of another dataset are errors naming the place."""
    path = Path(path)
    if path.is_dir():
        _check_run_data(path, data)
        files = samples_files(path)
        if not files:
            raise DataError(f"run folder {str(path)!r} has no samples file (samples.jsonl)")
    elif path.is_file():
        if path.parent.joinpath("config.yaml").is_file() and SAMPLES.fullmatch(path.name):
            _check_run_data(path.parent, data)
        files = [path]
    else:
        raise DataError(f"responses file {str(path)!r} does not exist")
    out, where = {}, {}
    for file in files:
        for n, raw in enumerate(file.read_bytes().split(b"\n"), 1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{file}:{n}: not UTF-8 text ({e.reason} at byte {e.start} of the line): save the file as UTF-8"
                ) from None
            try:
                row = json.loads(line)
                key, response = str(row["id"]), row["response"]
            except (ValueError, KeyError, TypeError) as e:
                raise DataError(f"{file}:{n}: expected a JSON object with 'id' and 'response' ({e})") from None
            if not isinstance(response, str):
                raise DataError(f"{file}:{n}: 'response' of id {key} is {response!r}, not text")
            if data is not None and row.get("data") not in (None, data) and row.get("data") != _label(data):
                raise DataError(
                    f"{file}:{n}: this reply answers {row['data']}, not {data}: score it with data={row['data']}"
                )
            if key in out:
                raise DataError(f"{file}:{n}: id {key} appears twice (first at {where[key]}): keep one response per id")
            out[key], where[key] = response, f"{file.name}:{n}"
    if not out:
        raise DataError(f"no responses in {str(path)!r}: expected JSON lines with 'id' and 'response'")
    return out


def _label(data: str) -> str | None:
    """A dataset's label (gpqa -> gpqa_diamond), as samples name it."""
    node = dataset_configs().get(data)
    return node.label if node is not None else None


def _check_run_data(folder: Path, data: str | None) -> None:
    """A run folder knows its dataset: scoring it as another one is an error, not silent nonsense."""
    config = folder / "config.yaml"
    if data is None or not config.is_file():
        return
    d = yaml.safe_load(config.read_text()).get("data", {})
    names = {d.get("name"), d.get("label")}
    if data not in names:
        raise DataError(
            f"{folder} holds a run on {d.get('label') or d.get('name')}, not {data}: use data={d.get('name')}"
        )


def scorer_for(data: str, root: str | None = None) -> TaskScorer:
    """The scorer of a dataset named as in conf/data (`gpqa`, or with its subset: `gpqa_main`)."""
    scored = {k: v for k, v in dataset_configs().items() if v.kind == "task"}
    if data not in scored:
        raise DataError(unknown_name_message("dataset for scoring", data, scored))
    spec = scored[data]
    from cactus_bench.adapters.benchmarks.scoring import (
        TaskScorer,  # lm-eval and datasets: after the offline switch (`main`)
    )

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


COMMAND = Command(
    prog="python -m cactus_bench.tools.score",
    about=__doc__,
    keys=(
        Key(
            "data",
            "the dataset the replies answer: arith, gpqa (gpqa_diamond), gpqa_extended, gpqa_main, gsm8k, ifeval",
            required=True,
        ),
        Key("responses", "a run folder, or a JSONL file of {id, response}", required=True),
        Key("output", "where the scores go (default: <paths.results>/scores/<responses name>.scores.json)"),
        Key("root", "the local data folder (default $CACTUS_BENCH_DATA; unset: the Hugging Face hub)"),
    ),
    examples=("python -m cactus_bench.tools.score data=gsm8k responses=results/runs/gsm8k/tiny/sps_m10_s0_1b6f40784c",),
)


def main(argv: list[str] | None = None) -> None:
    from cactus_bench.app.offline import LOCAL_DATA, go_offline_without_network, is_offline

    args = COMMAND.parse(argv)
    go_offline_without_network()  # no hub: offline at once, not ~28 s of retries before the first file
    root = args.root or os.environ.get("CACTUS_BENCH_DATA")
    if root is None and is_offline() and LOCAL_DATA.is_dir():  # the runs' fallback: ../shared/data
        root = str(LOCAL_DATA)
        print(f"offline: reading the benchmark files from {root}", file=sys.stderr)
    path = Path(args.responses)
    try:
        result = score_responses(args.data, read_responses(path, args.data), root)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if result["partial"]:
        print(f"note: scored {result['scored']} of {result['dataset_size']} {args.data} items (partial coverage)")
    out = Path(args.output) if args.output else default_output(path)
    write_text_atomic(out, json.dumps(result, indent=1))
    print(f"written: {out}")
    print(json.dumps(result))


def default_output(path: Path) -> Path:
    """<paths.results>/scores/<the input's name>.scores.json (the whole name: run folders have dots in it)."""
    from cactus_bench.app.schema import default_paths

    name = path.name.removesuffix(".jsonl") if path.is_file() else path.name
    return Path(default_paths().results) / "scores" / f"{name}.scores.json"


if __name__ == "__main__":
    main()

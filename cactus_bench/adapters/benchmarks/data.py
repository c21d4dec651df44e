"""Benchmark data from a local folder (the layout of `../shared/data`) or from the Hugging Face hub.

The folder is `data.root` in the config or the environment variable CACTUS_BENCH_DATA; without either,
data comes from the hub. Every loader is registered in `LOADERS` by dataset name (the name its lm-eval task YAML passes
as `dataset_kwargs.dataset`) and returns a `datasets.DatasetDict` whose rows carry `id`, the dataset's own
key (GSM8K/arith: 0-based row index of the test split, IFEval: `key`, GPQA: `Record ID`), so stored
responses can be matched and re-scored anywhere. Loaders take the data root first and ignore options they
do not use (lm-eval passes the task's metadata along).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import random
import re
import urllib.request
import zipfile
from pathlib import Path

import datasets

from cactus_bench.adapters.benchmarks.errors import DataError
from cactus_bench.core.registry import Registry

GPQA_SUBSETS = ("diamond", "main", "extended")
GPQA_PASSWORD = b"deserted-untie-orchid"  # published by the authors; it only keeps crawlers out
GPQA_SHUFFLE_SEED = 0  # the authors' random.seed(0) before lm-eval shuffles the answers (spec.py)
SPECBENCH_URL = "https://raw.githubusercontent.com/hemingkx/Spec-Bench/main/data/spec_bench/question.jsonl"


LOADERS: Registry = Registry("dataset loader", group="cactus_bench.datasets")
log = logging.getLogger("cactus_bench")


def data_root(root: str | os.PathLike | None = None) -> Path | None:
    """The local data folder: the explicit `root`, else $CACTUS_BENCH_DATA, else None (use the hub)."""
    root = root or os.environ.get("CACTUS_BENCH_DATA") or None
    if root is None:
        return None
    path = Path(root).expanduser()
    if not path.is_dir():
        raise DataError(f"data root {str(path)!r} (data.root / CACTUS_BENCH_DATA) is not a folder")
    return path


def _local_file(root: Path, rel: str) -> Path:
    path = root / rel
    if not path.is_file():
        raise DataError(f"missing data file {str(path)!r}: expected the layout of ../shared/data (see its README)")
    if path.stat().st_size == 0:
        raise DataError(
            f"data file {str(path)!r} is empty (0 bytes): a copy or download was cut short. Restore it from the "
            "published files (../shared/data's README names them and their sha256)"
        )
    return path


def _jsonl(root: Path, rel: str) -> list[dict]:
    """A local JSON-lines file's records; an empty file or a line that is no JSON object names the file and
    line."""
    path = _local_file(root, rel)
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            row = e
        if not isinstance(row, dict):
            raise DataError(
                f"data file {str(path)!r}, line {n}, is not a JSON object: the file is damaged. Restore it from "
                "the published files (../shared/data's README names them and their sha256)"
            )
        rows.append(row)
    if not rows:
        raise DataError(f"data file {str(path)!r} holds no records: restore it from the published files")
    return rows


def _with_ids(ds: datasets.Dataset) -> datasets.Dataset:
    return ds.add_column("id", list(range(len(ds))))


def _hub(path: str, name: str | None = None, **kwargs) -> datasets.DatasetDict:
    try:
        return datasets.load_dataset(path, name, **kwargs)
    except Exception as e:  # datasets raises many types for "cannot reach/find it"
        raise DataError(
            f"could not load {path}{'/' + name if name else ''} from the Hugging Face hub ({type(e).__name__}: {e}). "
            "Offline? Set data.root (or CACTUS_BENCH_DATA) to a folder with the published files "
            "(the layout of ../shared/data)."
        ) from e


@LOADERS.register("gsm8k")
def load_gsm8k(root: str | os.PathLike | None = None, **_) -> datasets.DatasetDict:
    local = data_root(root)
    if local:
        splits = ("train", "test")
        dd = datasets.DatasetDict({s: datasets.Dataset.from_list(_jsonl(local, f"gsm8k/{s}.jsonl")) for s in splits})
    else:
        dd = _hub("openai/gsm8k", "main")
    return datasets.DatasetDict({s: _with_ids(dd[s]) for s in ("train", "test")})


def normalise_ifeval_kwargs(kwargs: list[dict]) -> list[dict]:
    """Arrow stores kwargs as a struct with every argument name (None when unused): drop the Nones."""
    return [{k: v for k, v in kw.items() if v is not None} for kw in kwargs]


@LOADERS.register("ifeval")
def load_ifeval(root: str | os.PathLike | None = None, **_) -> datasets.DatasetDict:
    """IFEval prompts. `kwargs` is stored as JSON text of the local form: Arrow would otherwise widen every
    dict to the union of all argument names (the hub's form), whatever the source."""
    local = data_root(root)
    if local:
        rows = _jsonl(local, "ifeval/input_data.jsonl")
    else:
        rows = list(_hub("google/IFEval")["train"])
    return datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(
                [
                    {
                        "key": r["key"],
                        "prompt": r["prompt"],
                        "instruction_id_list": r["instruction_id_list"],
                        "kwargs": json.dumps(normalise_ifeval_kwargs(r["kwargs"]), sort_keys=True),
                        "id": r["key"],
                    }
                    for r in rows
                ]
            )
        }
    )


def _hf_token() -> str | None:
    try:
        from huggingface_hub import get_token
    except ImportError:  # pragma: no cover - huggingface_hub always ships with datasets
        return os.environ.get("HF_TOKEN")
    return get_token()


def gpqa_answer_text(text: str | None) -> str:
    """An answer as the authors' pinned lm-eval GPQA CoT task (v1.0) shows it: trimmed, `[title]` made a
    sentence break, every other `[...]` span deleted, double spaces collapsed."""
    if text is None:
        return " "
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def gpqa_docs(rows: list[dict], seed: int = GPQA_SHUFFLE_SEED) -> list[dict]:
    """The four answers of each question in the authors' order: Python's `random.shuffle` run over the
    questions in file order after `random.seed(0)` (a private generator, so the global one is untouched),
    and the correct letter. Where two answers coincide after cleaning, the first copy counts as the
    correct one (the authors' `list.index`); that is logged, by record id."""
    rng = random.Random(seed)
    out = []
    for row in rows:
        choices = [gpqa_answer_text(row[f"Incorrect Answer {i}"]) for i in (1, 2, 3)]
        correct_text = gpqa_answer_text(row["Correct Answer"])
        choices.append(correct_text)
        rng.shuffle(choices)
        if len(set(choices)) < 4:  # the record id only: GPQA's text must not appear in logs
            log.warning(
                "GPQA %s: two answers coincide after cleaning; the first copy is scored as correct", row["Record ID"]
            )
        correct = choices.index(correct_text)
        out.append(
            {
                "Question": row["Question"],
                "Record ID": row["Record ID"],
                "High-level domain": row.get("High-level domain"),
                "Subdomain": row.get("Subdomain"),
                "choice1": choices[0],
                "choice2": choices[1],
                "choice3": choices[2],
                "choice4": choices[3],
                "choices": choices,
                "answer": f"({'ABCD'[correct]})",
                "id": row["Record ID"],
            }
        )
    return out


@LOADERS.register("gpqa")
def load_gpqa(root: str | os.PathLike | None = None, subset: str = "diamond", **_) -> datasets.DatasetDict:
    """GPQA from the encrypted zip (decrypted in memory, never written) or the gated hub dataset."""
    if subset not in GPQA_SUBSETS:
        raise DataError(f"unknown GPQA subset {subset!r}; valid choices: {', '.join(GPQA_SUBSETS)}")
    local = data_root(root)
    if local:
        with zipfile.ZipFile(_local_file(local, "gpqa/dataset.zip")) as z:
            raw = z.read(f"dataset/gpqa_{subset}.csv", pwd=GPQA_PASSWORD)
        rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))
    else:
        if not _hf_token():
            raise DataError(
                "GPQA (Idavidrein/gpqa) is gated: accept its terms on the Hugging Face hub and log in "
                "(`huggingface-cli login` or HF_TOKEN), or set data.root / CACTUS_BENCH_DATA to a folder "
                "with gpqa/dataset.zip"
            )
        rows = list(_hub("Idavidrein/gpqa", f"gpqa_{subset}")["train"])
    return datasets.DatasetDict({"train": datasets.Dataset.from_list(gpqa_docs(rows))})


@LOADERS.register("arith")
def load_arith(root: str | os.PathLike | None = None, arith_seed: int = 0, **_) -> datasets.DatasetDict:
    """The embedded synthetic task, generated deterministically (no files needed)."""
    from cactus_bench.adapters.embedded import arith

    def build(split, n):
        items = arith.generate(split, n, arith_seed)
        return datasets.Dataset.from_list(
            [{"question": it.question, "answer": it.answer, "id": i} for i, it in enumerate(items)]
        )

    return datasets.DatasetDict({"train": build("train", 200), "test": build("test", arith.TEST_SIZE)})


def load_specbench(root: str | os.PathLike | None = None) -> list[dict]:
    """Spec-Bench's 480 questions (no hub dataset: the GitHub file, or the local copy)."""
    local = data_root(root)
    if local:
        return _jsonl(local, "spec_bench/question.jsonl")
    else:
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            raise DataError(
                "Spec-Bench comes from GitHub, and this run is offline: set data.root / "
                "CACTUS_BENCH_DATA to a folder with spec_bench/question.jsonl"
            )
        try:
            with urllib.request.urlopen(SPECBENCH_URL, timeout=30) as r:
                text = r.read().decode("utf-8")
        except OSError as e:
            raise DataError(
                f"could not download Spec-Bench questions from {SPECBENCH_URL} ({e}); set data.root "
                "to a folder with spec_bench/question.jsonl"
            ) from e
    return [json.loads(line) for line in text.splitlines() if line.strip()]

"""Stored runs in another tool's layout, for the scripts users already trust:

    python -m cactus_bench.tools.export specbench RUN [RUN ...] out=DIR

writes each run's answers as Spec-Bench lays them out (`<model_id>.jsonl`, turns cleaned as its code cleans
them, a fresh answer id each), over the questions every given run answered (as a table reads them), with
`<model_id>.meta.json` beside it (batch size, load, caveats), and prints the `evaluation/speed.py` and
`equal.py` commands that read them. RUN is a run's key (a unique prefix is enough) or its folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cactus_bench.app.errors import fail
from cactus_bench.app.schema import default_paths
from cactus_bench.app.store import StoreError
from cactus_bench.core.cli import Command, Key
from cactus_bench.core.utils import write_text_atomic
from cactus_bench.tools.runs import RunNotFound, find_folder, load

COMMAND = Command(
    prog="python -m cactus_bench.tools.export",
    about=__doc__,
    positional=(
        Key("format", "the layout to write", required=True, choices=("specbench",)),
        Key("runs", "the runs: keys (or unique prefixes) or folders", required=True, kind=list),
    ),
    keys=(
        Key("out", "the folder to write into", required=True),
        Key("results", "the stored runs", default_paths().runs),
    ),
    examples=("python -m cactus_bench.tools.export specbench 1b6f40784c 9a0c2e11f7 out=specbench_answers",),
)


def export_specbench(folders: list[Path], out: Path) -> list[Path]:
    """Each run's Spec-Bench answer file (and its meta file) in `out`, over the questions all of them answered;
    returns the answer files, the verifier-alone runs' first."""
    from cactus_bench.adapters.benchmarks.specbench import answer_lines, export_meta, verifier_tokenizer
    from cactus_bench.core.decode.api import special_token_texts

    runs = [load(f) for f in folders]
    if any(r.config["data"].get("kind") != "specbench" for r in runs):
        raise RunNotFound("`export specbench` takes Spec-Bench runs (data=specbench) only")
    shared = set.intersection(*({s["id"] for s in r.samples} for r in runs))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for run in sorted(runs, key=lambda r: not r.is_baseline):
        pair = run.config["pair"]
        tokenizer = verifier_tokenizer(pair["verifier"], pair.get("revision"))
        samples = [s for s in run.samples if s["id"] in shared]
        model_id = run.identity.model_id
        meta = export_meta(samples, model_id) | {
            "run": str(run.folder),
            "questions": f"the {len(shared)} every exported run answered",
        }
        path = out / f"{model_id}.jsonl"
        write_text_atomic(path, answer_lines(samples, model_id, special_token_texts(tokenizer)))
        write_text_atomic(out / f"{model_id}.meta.json", json.dumps(meta, indent=1))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    args = COMMAND.parse(argv)
    try:
        folders = [find_folder(Path(args.results), name) for name in args.runs]
        written = export_specbench(folders, Path(args.out))
    except (StoreError, ValueError, OSError) as e:
        fail(e)
    print("\n".join(f"written: {p}" for p in written))
    base, *others = written
    from cactus_bench.adapters.benchmarks.specbench import verifier_tokenizer

    pair = load(folders[0]).config["pair"]
    verifier = verifier_tokenizer(pair["verifier"], pair.get("revision")).name_or_path  # a local path: speed.py's
    for other in others:
        print(
            f"speed.py: python evaluation/speed.py --file-path {other} --base-path {base} --tokenizer-path {verifier}"
        )
        print(
            f"equal.py: python evaluation/equal.py --file-path {other.parent}/ --jsonfile1 {base.name} "
            f"--jsonfile2 {other.name}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])

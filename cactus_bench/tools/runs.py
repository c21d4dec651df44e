"""The stored runs, without a spec file:

    python -m cactus_bench.tools.runs list [data=gsm8k] [pair=tiny] [method=cactus]   every run: setting, n, status
    python -m cactus_bench.tools.runs show RUN [item=ID]     a run's setting and figures, or one item's reply
    python -m cactus_bench.tools.runs compare RUN OTHER      two runs side by side on the items both decoded

RUN is a run's key (the folder name's last part, as `list` prints it; a unique prefix is enough) or its
folder. `compare` reads OTHER against RUN as a table does against its reference: Δ score paired by item,
Rej with RUN as the SpS reference, each metric on the shared items only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from cactus_bench.app.errors import fail
from cactus_bench.app.runs import Run, stored_references
from cactus_bench.app.schema import default_paths
from cactus_bench.app.store import StoreError, read_samples
from cactus_bench.core import metrics
from cactus_bench.core.cli import Command, Key
from cactus_bench.core.methods import display_name
from cactus_bench.tools.report import tables

COMMAND = Command(
    prog="python -m cactus_bench.tools.runs",
    about=__doc__,
    positional=(
        Key("what", "what to do", required=True, choices=("list", "show", "compare")),
        Key("run", "a run's key (or a unique prefix of it) or folder, for show and compare"),
        Key("other", "the second run, for compare"),
    ),
    keys=(
        Key("results", "the stored runs", default_paths().runs),
        Key("data", "list: only runs on this dataset (its label)"),
        Key("pair", "list: only runs filed under this pair"),
        Key("method", "list: only runs of this method"),
        Key("item", "show: one item's reply and figures (its id)"),
    ),
    examples=(
        "python -m cactus_bench.tools.runs list data=arith",
        "python -m cactus_bench.tools.runs show 1b6f40784c item=3",
        "python -m cactus_bench.tools.runs compare 1b6f40784c 9a0c2e11f7",
    ),
)


class RunNotFound(StoreError):
    """A run named on the command line is not in the store (or the name fits several)."""


def stored(results: Path) -> list[Path]:
    """Every run folder under `results`, finished or not (a config and a manifest)."""
    return sorted({p.parent for p in Path(results).glob("*/*/*/config.yaml") if list(p.parent.glob("manifest*.json"))})


def status(folder: Path) -> str:
    """The run's status: complete when its summary is written, else what its shards' manifests say."""
    states = set()
    for manifest in folder.glob("manifest*.json"):
        try:
            states.add(json.loads(manifest.read_text()).get("status", "unknown"))
        except (OSError, ValueError):
            states.add("unreadable")
    if (folder / "summary.json").exists() and states <= {"complete"}:
        return "complete"
    return "/".join(sorted(states)) or "unknown"


def find_folder(results: Path, name: str) -> Path:
    """A run's folder from its key, a prefix of it, or its path."""
    if Path(name).is_dir() and (Path(name) / "config.yaml").exists():
        return Path(name)
    hits = [f for f in stored(results) if f.name.rsplit("_", 1)[-1].startswith(name)]
    if len(hits) != 1:
        what = "no stored run has" if not hits else f"{len(hits)} stored runs have"
        raise RunNotFound(
            f"{what} a key starting with {name!r} under {results}: `python -m cactus_bench.tools.runs list` prints "
            "every run's key (give more of it, or the run's folder)"
        )
    return hits[0]


def load(folder: Path) -> Run:
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"samples": None}
    run = Run(folder, yaml.safe_load((folder / "config.yaml").read_text()), summary)
    if not summary_path.exists():  # an unfinished run: its figures from what is stored
        run.summary = {"samples": len(run.samples), **run.kind.summary(run.samples, run.config["data"])}
    return run.checked()


def method_label(run: Run) -> str:
    """The method as tables name it, with its parameters: `Cactus delta=0.75`, `Verifier`."""
    params = " ".join(f"{k}={v}" for k, v in sorted(run.identity.params.items()) if v is not None)
    return f"{display_name(run.identity.method)} {params}".strip()


def listing(results: Path, data: str | None, pair: str | None, method: str | None) -> str:
    """Every stored run, its figures read through the one check the tables use (`load`: a summary its
    samples no longer support is recomputed from them)."""
    rows = ["| data | pair | method | m | seed | n | status | score | AL (Σ rounds) | key |", "|" + " --- |" * 10]
    for folder in stored(results):
        data_label, pair_name = folder.parent.parent.name, folder.parent.name
        if (data and data != data_label) or (pair and pair != pair_name):
            continue
        try:
            run = load(folder)
        except (OSError, ValueError, KeyError, TypeError) as e:  # StoreError too: a damaged line, named
            if not method or folder.name.startswith(method):
                rows.append(
                    f"| {data_label} | {pair_name} | {folder.name} | | | | unreadable ({type(e).__name__}) | | | |"
                )
            continue
        if method and not run.identity.method.startswith(method):
            continue
        ident, summary = run.identity, run.summary
        score, al = summary.get("score"), summary.get("accepted_length")
        rows.append(
            f"| {data_label} | {pair_name} | {method_label(run)} | {'' if ident.m is None else ident.m} | "
            f"{ident.seed} | {len(run.samples)} | {status(folder)} | "
            f"{'' if score is None else f'{score:.2f}'} | {'' if al is None else f'{al:.2f}'} | "
            f"{folder.name.rsplit('_', 1)[-1]} |"
        )
    return "\n".join(rows) + f"\n\n{len(rows) - 2} run(s) under {results}\n"


def figures(run: Run, results: Path) -> tuple[list[str], list[str]]:
    """A run's figures as its table cell shows them (against its stored SpS and verifier-alone runs, on the
    items they share): Markdown rows, and the notes (caveats) that go with them."""
    refs = {k: r for k, r in stored_references(results, run.identity).items() if r is not None}
    shared = set.intersection({s["id"] for s in run.samples}, *({s["id"] for s in r.samples} for r in refs.values()))
    refs = {k: r.restricted(shared) for k, r in refs.items()}
    rows, notes = [], []
    for group, values in run.kind.cells(run.restricted(shared), refs.get("sps"), refs.get("baseline")).items():
        for col, value in values.items():
            found, caveat = metrics.column_metric(col), values.get(f"{col}_caveat")
            if caveat is not None:  # a withheld figure (value None) keeps its reason, as the table does
                notes.append(caveat[1])
            if found is None or value is None or (found[0].positional and found[1] is None):  # positions: 1 row each
                continue
            mark = tables.CAVEAT_MARK if caveat is not None else None
            text = tables.cell_text(value, col, None, values.get(f"{col}_ci"), values.get(f"{col}_n"), mark)
            rows.append(f"| {'' if group is None else f'{group}: '}{tables.label(col)} | {text} |")
    if len(shared) != len(run.samples):
        notes.append(f"figures on the {len(shared)} items this run shares with its reference runs")
    return rows, notes


def show(run: Run, item: str | None, results: Path) -> str:
    if item is None:
        lines = [f"# {run.folder}", "", f"status: {status(run.folder)}; items: {len(run.samples)}"]
        lines += [f"- {k}: {v}" for k, v in run.identity.as_dict().items()]
        rows, notes = figures(run, results)
        lines += ["", "| metric | value |", "| --- | --- |", *rows]
        lines += ["", *(f"- {n}" for n in dict.fromkeys(([run.note] if run.note else []) + notes))]
        return "\n".join(lines).rstrip() + "\n"
    sample = next((s for s in read_samples(run.folder) if str(s["id"]) == str(item)), None)
    if sample is None:
        raise RunNotFound(
            f"{run.folder} holds no item {item!r} (its ids: the dataset's own keys, as samples.jsonl has)"
        )
    stats = {k: v for k, v in sample["stats"].items() if v is not None}
    return (
        f"# item {item} of {run.folder.name}\n\n## reply\n\n{sample.get('response', '')}\n\n"
        f"## scores\n\n{json.dumps(sample.get('scores', {}))}\n\n## figures\n\n{json.dumps(stats, indent=1)}\n"
    )


def compare(base: Run, other: Run) -> str:
    """The two runs on the items both decoded: each one's metrics, and OTHER against BASE."""
    shared = {s["id"] for s in base.samples} & {s["id"] for s in other.samples}
    if not shared:
        raise RunNotFound(f"{base.folder.name} and {other.folder.name} share no item: nothing to compare")
    a, b = base.restricted(shared), other.restricted(shared)
    lines = [
        f"# {other.folder.name} against {base.folder.name}, on the {len(shared)} items both decoded",
        "",
        f"| metric | {base.folder.name} | {other.folder.name} |",
        "| --- | --- | --- |",
    ]
    for m in metrics.METRICS.values():
        if m.pooled is None or m.timed or m.name not in a.summary:
            continue
        values = [r.summary.get(m.name) for r in (a, b)]
        if any(v is not None for v in values):
            lines.append(f"| {m.label} | " + " | ".join("–" if v is None else m.format(v) for v in values) + " |")
    if "score" in a.summary:
        scores = ("–" if r.summary.get("score") is None else f"{r.summary['score']:.2f}" for r in (a, b))
        lines.append("| score | " + " | ".join(scores) + " |")
    lines.append("")
    for name in ("score_delta", "rej"):
        m = metrics.METRICS.get(name)
        est = m.relative(b.samples, a.samples)
        if est is not None:  # in the metric's own format and unit, as the tables print it
            interval = "" if est.low is None else f" [{m.format(est.low)}, {m.format(est.high)}]"
            what = "Δ score, paired by item" if name == "score_delta" else "Rej, this run against the first as SpS"
            lines.append(f"- {what}: {m.format(est.value)}{interval} (n = {est.items})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = COMMAND.parse(argv)
    results = Path(args.results)
    try:
        if args.what == "list":
            print(listing(results, args.data, args.pair, args.method), end="")
        elif args.run is None:
            raise RunNotFound(f"`{args.what}` needs a run: its key (as `list` prints it) or its folder")
        elif args.what == "show":
            print(show(load(find_folder(results, args.run)), args.item, results), end="")
        else:
            if args.other is None:
                raise RunNotFound("`compare` needs two runs: RUN OTHER (keys as `list` prints them, or folders)")
            print(compare(load(find_folder(results, args.run)), load(find_folder(results, args.other))), end="")
    except (StoreError, ValueError) as e:
        fail(e)


if __name__ == "__main__":
    main(sys.argv[1:])

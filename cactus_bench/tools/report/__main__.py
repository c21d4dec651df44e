"""Tables (CSV, Markdown, LaTeX) and figures (PNG, PDF) from the stored runs, into `paths.tables` and
`paths.figures` (conf/paths: results/ unless CACTUS_BENCH_RESULTS or results= moves it). `table` renders one
table spec; `figures` every figure spec of sweeps/."""

from __future__ import annotations

from pathlib import Path

import yaml

from cactus_bench.app.errors import fail
from cactus_bench.app.runs import AmbiguousRuns, load_runs
from cactus_bench.app.schema import SWEEPS_DIR, default_paths
from cactus_bench.app.store import StoreError
from cactus_bench.core.cli import Command, Key
from cactus_bench.tools.report.figures import figures
from cactus_bench.tools.report.specs import SPEC_KEYS, SpecError, load_spec, spec_overrides
from cactus_bench.tools.report.tables import render_table


def command() -> Command:
    paths = default_paths()
    return Command(
        prog="python -m cactus_bench.tools.report",
        about=__doc__,
        positional=(
            Key("what", "what to render", required=True, choices=("table", "figures")),
            Key("spec", "the table spec (sweeps/*.yaml), for `table`"),
        ),
        keys=(
            Key("results", "the stored runs", paths.runs),
            Key(
                "out",
                f"where to write (default {paths.tables} / {paths.figures}; with results= elsewhere: tables/ or "
                "figures/ beside that runs folder, so another store's outputs never replace these)",
            ),
            *SPEC_KEYS,
        ),
        overrides="the Hydra overrides the runs were made with beyond the spec's (e.g. sampling=greedy)",
        examples=(
            "python -m cactus_bench.tools.report table sweeps/table1.yaml",
            "python -m cactus_bench.tools.report figures",
        ),
    )


def main(argv=None):
    paths = default_paths()
    args = command().parse(argv)
    try:
        runs = load_runs(args.results)
    except StoreError as e:  # a damaged samples line: its paragraph (file, line, what to do)
        fail(e)
    elsewhere = Path(args.results).resolve() != Path(paths.runs).resolve()
    beside = Path(args.results).parent  # another store's tables and figures go beside it
    if args.what == "table":
        if not args.spec:
            fail(SpecError("`table` needs a spec, e.g. python -m cactus_bench.tools.report table sweeps/table1.yaml"))
        try:
            spec = load_spec(args.spec, spec_overrides(args))
            out = args.out or (beside / "tables" if elsewhere else paths.tables)
            md, path = render_table(spec, runs, out, args.overrides)
        except (AmbiguousRuns, StoreError, SpecError) as e:  # a copied run, a damaged line, a bad spec: a paragraph
            fail(e)
        print(md)
        if path is not None:
            print(f"written: {path.with_suffix('')}.{{csv,md,tex}}")
    else:
        try:
            specs = [
                load_spec(p, spec_overrides(args))
                for p in sorted(SWEEPS_DIR.glob("*.yaml"))
                if "figure" in (yaml.safe_load(p.read_text()) or {})
            ]
        except SpecError as e:
            fail(e)
        out = Path(args.out or (beside / "figures" if elsewhere else paths.figures))
        try:
            made = figures(runs, out, specs, args.overrides)
        except OSError as e:
            fail(StoreError(f"cannot write the figures into {out} ({e.strerror or e}): give out= a writable folder"))
        print("\n".join(str(p) for p in made.values()) or "no runs to plot")


if __name__ == "__main__":
    main()

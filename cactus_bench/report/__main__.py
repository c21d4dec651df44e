"""python -m cactus_bench.report table SPEC [overrides] | figures [overrides]

Tables (CSV, Markdown, LaTeX) and figures (PNG, PDF) from the stored runs, into `paths.tables` and
`paths.figures` (conf/paths: results/ unless CACTUS_BENCH_RESULTS or --results moves it). Overrides are the
Hydra overrides the runs were made with beyond the spec's (e.g. sampling=greedy)."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from ..app.runs import AmbiguousRuns, load_runs
from ..app.schema import SWEEPS_DIR, default_paths
from ..app.store import StoreError
from .figures import figures
from .specs import load_spec
from .tables import render_table


def main(argv=None):
    paths = default_paths()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["table", "figures"])
    ap.add_argument("spec", nargs="?", help="table spec (sweeps/*.yaml) for `table`")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides the runs were made with (e.g. sampling=greedy)")
    ap.add_argument("--results", default=paths.runs, help=f"the stored runs (default {paths.runs})")
    ap.add_argument(
        "--out",
        default=None,
        help=f"where to write (default {paths.tables} / {paths.figures}; with --results elsewhere: tables/ or "
        "figures/ beside that runs folder, so another store's outputs never replace these)",
    )
    ap.add_argument("--pair", default=None, help="override the spec's pair (e.g. tiny)")
    args = ap.parse_intermixed_args(argv)  # options after the overrides work too
    if args.what == "figures" and args.spec and "=" in args.spec:  # `figures key=value`: no spec, an override
        args.overrides.insert(0, args.spec)
    runs = load_runs(args.results)
    elsewhere = Path(args.results).resolve() != Path(paths.runs).resolve()
    beside = Path(args.results).parent  # another store's tables and figures go beside it
    if args.what == "table":
        if not args.spec:
            ap.error("`table` needs a spec, e.g. sweeps/table1.yaml")
        spec = load_spec(args.spec, {"pair": args.pair})
        try:
            out = args.out or (beside / "tables" if elsewhere else paths.tables)
            md, path = render_table(spec, runs, out, args.overrides)
        except (AmbiguousRuns, StoreError) as e:  # two copies of a run, or a damaged samples line: one paragraph
            raise SystemExit(f"error: {e}") from None
        print(md)
        if path is not None:
            print(f"written: {path.with_suffix('')}.{{csv,md,tex}}")
    else:
        specs = [
            load_spec(p, {"pair": args.pair})
            for p in sorted(SWEEPS_DIR.glob("*.yaml"))
            if "figure" in (yaml.safe_load(p.read_text()) or {})
        ]
        made = figures(runs, args.out or (beside / "figures" if elsewhere else paths.figures), specs, args.overrides)
        print("\n".join(str(p) for p in made.values()) or "no runs to plot")


if __name__ == "__main__":
    main()

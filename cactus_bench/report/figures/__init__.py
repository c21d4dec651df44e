"""The paper's figures from stored runs, one module per figure family (PNG + PDF each).

Two kinds of family:

* drawn from the store alone (`GROUP_FAMILIES`): for each pair, dataset and setting (runs that differ in
  anything but the method are never drawn together) and each m, the families its benchmark kind names
  (`Kind.figures`): Figure 1 (score vs AL), Figure 2 (δ grid), Figure 3 (speedup), Spec-Bench's speedup
  per category. Each is `draw(sink, name, title, runs, verifier_runs)`.
* driven by a figure spec (`SPEC_FAMILIES`, `figure:` in sweeps/*.yaml): Figure 4 over model families and
  the lossy trade-off. Each is `draw(sink, spec, runs, overrides) -> notes`.

A new figure is one module here and its name in one of the two maps (and, for a store-driven family, in
its benchmark kind's `figures`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ...app.runs import Run
from . import cross_architecture, delta_grid, lossy_tradeoff, specbench_speedup, speedup, tradeoff
from .common import Sink, runs_frame

log = logging.getLogger("cactus_bench")

GROUP_FAMILIES = {
    "tradeoff": tradeoff.draw,
    "delta_grid": delta_grid.draw,
    "speedup": speedup.draw,
    "specbench_speedup": specbench_speedup.draw,
}
SPEC_FAMILIES = {"cross_architecture": cross_architecture.draw, "lossy_tradeoff": lossy_tradeoff.draw}


def figures(runs: list[Run], out_dir: Path | str, specs: list[dict] = (), overrides: list[str] = ()) -> dict[str, Path]:
    """Every figure the stored runs support, and those of the given figure specs; returns name -> PNG."""
    sink = Sink(out_dir)
    for spec in specs:
        notes = SPEC_FAMILIES[spec["figure"]](sink, spec, runs, list(overrides))
        if notes:
            sink.notes(spec["name"], notes)
            log.info("%s: %s", spec["name"], "; ".join(notes))
    df = runs_frame(runs)
    if not len(df):
        return sink.made
    for (pair, data, setting), g in df.groupby(["pair", "data", "setting"]):
        several = df[(df["pair"] == pair) & (df["data"] == data)]["setting"].nunique() > 1
        families = g.iloc[0]["run"].kind.figures
        ver = g[g["baseline"]]
        for m, gm in g[~g["baseline"]].groupby("m"):
            name = f"{data}_{pair}_m{m}" + (f"_{setting}" if several else "")
            for family in families:
                GROUP_FAMILIES[family](sink, name, f"{data} ({pair}, m={m})", gm, ver)
    return sink.made

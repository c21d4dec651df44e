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

from cactus_bench.app.runs import Run
from cactus_bench.tools.report.figures import (
    cross_architecture,
    delta_grid,
    lossy_tradeoff,
    specbench_speedup,
    speedup,
    tradeoff,
)
from cactus_bench.tools.report.figures.common import Sink, runs_frame, setting_differences

log = logging.getLogger("cactus_bench")

GROUP_FAMILIES = {
    "tradeoff": tradeoff.draw,
    "delta_grid": delta_grid.draw,
    "speedup": speedup.draw,
    "specbench_speedup": specbench_speedup.draw,
}
SPEC_FAMILIES = {"cross_architecture": cross_architecture.draw, "lossy_tradeoff": lossy_tradeoff.draw}


def figures(runs: list[Run], out_dir: Path | str, specs: list[dict] = (), overrides: list[str] = ()) -> dict[str, Path]:
    """Every figure the stored runs support, and those of the given figure specs; returns name -> PNG. The
    figures of this drawing's scope (its overrides) in `out_dir` that it did not make again (their runs are
    gone) are removed; `index.md` says what each figure shows."""
    sink = Sink(out_dir, [*overrides, *sorted({f"pair={s['pair_override']}" for s in specs if s.get("pair_override")})])
    try:
        return _draw(sink, runs, specs, overrides)
    finally:
        for stale in sink.remove_stale():
            log.info("removed %s: no stored run draws it any more", stale)


def _draw(sink: Sink, runs: list[Run], specs, overrides) -> dict[str, Path]:
    for spec in specs:
        sink.title = spec.get("title", spec["name"])
        notes = SPEC_FAMILIES[spec["figure"]](sink, spec, runs, list(overrides))
        if notes:
            sink.notes(spec["name"], notes)
            log.info("%s: %s", spec["name"], "; ".join(notes))
    df = runs_frame(runs)
    if not len(df):
        return sink.made
    differences = {
        key: text
        for _, same_data in df.groupby(["pair", "data"])
        for key, text in setting_differences(same_data).items()
    }
    for (pair, data, setting), g in df.groupby(["pair", "data", "setting"]):
        several = bool(differences.get(setting))
        families = g.iloc[0]["run"].kind.figures
        ver = g[g["baseline"]]
        for m, gm in g[~g["baseline"]].groupby("m"):
            name = f"{data}_{pair}_m{m}" + (f"_{setting}" if several else "")
            n = max(len(r.samples) for r in [*gm["run"], *ver["run"]])
            title = f"{data} ({pair}, m={m}{', ' + differences[setting] if several else ''}; n={n})"
            sink.title = title
            for family in families:
                GROUP_FAMILIES[family](sink, name, title, gm, ver)
    return sink.made

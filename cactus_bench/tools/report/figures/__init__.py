"""The paper's figures from stored runs, one module per figure family (PNG + PDF each).

Every family is registered in `common.FAMILIES` by `@figure_family(name, source)` on its `draw`:

* drawn from the store alone (`source="store"`): for each pair, dataset and setting (runs that differ in
  anything but the method are never drawn together) and each m, the families its benchmark kind names
  (`Kind.figures`): Figure 1 (score vs AL), Figure 2 (δ grid), Figure 3 (speedup), Spec-Bench's speedup
  per category. Each is `draw(sink, name, title, runs, verifier_runs)`.
* driven by a figure spec (`source="spec"`, `figure:` in sweeps/*.yaml): Figure 4 over model families and
  the lossy trade-off. Each is `draw(sink, spec, runs, overrides) -> notes`.

A new figure is one module here (every module of this package is imported below), or one in an installed
package named in the `cactus_bench.figures` entry points; a store-driven family is also named in its
benchmark kind's `figures`.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from pathlib import Path

from cactus_bench.app.runs import Run
from cactus_bench.tools.report.figures.common import FAMILIES, Sink, runs_frame, setting_differences

log = logging.getLogger("cactus_bench")

for _module in pkgutil.iter_modules(__path__):  # importing a figure module registers its family
    importlib.import_module(f"{__name__}.{_module.name}")


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
        notes = _family(spec["figure"], "spec").draw(sink, spec, runs, list(overrides))
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
                _family(family, "store").draw(sink, name, title, gm, ver)
    return sink.made


def _family(name: str, source: str):
    family = FAMILIES.get(name)
    if family.source != source:
        raise ValueError(f"figure family {name!r} is drawn from a {family.source}, not a {source}")
    return family

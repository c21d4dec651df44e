"""Relaxed rules at matched acceptance (sweeps/relaxed.yaml): Δ score against the verifier over accepted length,
one curve per rule through its knob's grid (starting at SpS), each point with its paired 95 % interval; the
matched-acceptance table (`report/matched.py`) reads the same curves at fixed ALs."""

from __future__ import annotations

from cactus_bench.app.runs import Run
from cactus_bench.tools.report.figures.common import MARKERS, figure_family, plt
from cactus_bench.tools.report.matched import DELTA, curves


@figure_family("relaxed", "spec")
def draw(sink, spec: dict, runs: list[Run], overrides: list[str]) -> list[str]:
    from cactus_bench.tools.report.tables import build_table

    df, _ = build_table(spec, runs, overrides)
    notes = []
    for data in spec["data"]:
        found = curves(spec, df, data)
        if not found:
            notes.append(f"{data}: no stored runs of this figure: nothing drawn")
            continue
        fig, ax = plt.subplots(figsize=(7.2, 4.4))
        ax.axhline(0, color="grey", lw=0.8, label="verifier alone (Δ = 0)")
        for (name, curve), marker in zip(found.items(), MARKERS * 3):
            pts = [p for p in curve if p[DELTA][0] is not None]
            ys = [p[DELTA][0] for p in pts]
            low = [y - (p[DELTA][1] if p[DELTA][1] is not None else y) for p, y in zip(pts, ys)]
            high = [(p[DELTA][2] if p[DELTA][2] is not None else y) - y for p, y in zip(pts, ys)]
            ax.errorbar([p["al"] for p in pts], ys, yerr=[low, high], fmt=f"{marker}-", capsize=2, label=name)
        budget = spec.get("matched", {}).get("score_budget")
        if budget is not None:
            ax.axhline(-budget, color="grey", ls=":", lw=0.8, label=f"Δ score budget −{budget:g}")
        ax.set(xlabel="accepted length AL", ylabel="Δ score vs the verifier (points, paired 95 % interval)",
               title=f"{spec.get('title', spec['name'])} — {data}, m = {spec['m']}")  # fmt: skip
        ax.legend(fontsize=7, ncol=2)
        sink.save(fig, f"{spec['name']}_{data}")
    return notes

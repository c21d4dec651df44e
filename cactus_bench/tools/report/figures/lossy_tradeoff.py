"""The lossy trade-off (sweeps/lossy_tradeoff.yaml): score against acceptance, each lossy method a curve
through its parameter grid (parameter order), with the paper's stated bounds as arrows; beside it, the
divergence from the verifier against the same acceptance (`divergence:`, output KL by default)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from cactus_bench.app.runs import Run
from cactus_bench.core.methods import is_baseline
from cactus_bench.tools.report.figures.common import figure_family, plt, verifier_band
from cactus_bench.tools.report.figures.spec_points import DIVERGENCES, X_AXES, points


@figure_family("lossy_tradeoff", "spec")
def draw(sink, spec: dict, runs: list[Run], overrides: list[str]) -> list[str]:
    x = spec.get("x", "acceptance_rate")
    div = spec.get("divergence", "output_kl")
    if x not in X_AXES or div not in DIVERGENCES:
        raise ValueError(
            f"{spec['name']}: x must be one of {sorted(X_AXES)} and divergence one of {sorted(DIVERGENCES)}"
        )
    notes = [f"x axis: {X_AXES[x]}", f"divergence panel: {DIVERGENCES[div]}"]
    paper = pd.read_csv(spec["paper"]) if spec.get("paper") and Path(spec["paper"]).exists() else None
    for data in spec["data"]:
        pts = points(spec, runs, data, spec["pair"], overrides)
        if all(p["run"] is None for p in pts):
            notes.append(f"{data}: no stored runs of this figure: nothing drawn")
            continue
        fig, (ax, ax_kl) = plt.subplots(1, 2, figsize=(10.4, 4))
        ver = next((p for p in pts if is_baseline(p["row"]["method"]) and p["score"] is not None), None)
        if ver is not None:
            verifier_band(ax, ver["score"], ver["stderr"], "verifier ±1σ")
        curves: dict[str, list] = {}
        for p in pts:
            if is_baseline(p["row"]["method"]):
                continue
            curves.setdefault(p["row"].get("curve", p["row"]["label"]), []).append(p)
            if p["run"] is None:
                notes.append(f"{data}: no run for {p['row']['label']} (a gap in its curve)")
        for (name, curve), marker in zip(curves.items(), "osD^vP*X"):
            xs = [p[x] if p["run"] is not None else math.nan for p in curve]  # NaN: matplotlib leaves a gap
            ys = [p["score"] if p["run"] is not None else math.nan for p in curve]
            errs = [p["stderr"] or 0 for p in curve]
            line = ax.errorbar(xs, ys, yerr=errs, fmt=f"{marker}-", capsize=2, label=name)
            kls = [p[div] if p["run"] is not None and p[div] is not None else math.nan for p in curve]
            ax_kl.plot(xs, kls, f"{marker}-", color=line[0].get_color(), label=name)
            param = curve[0]["row"].get("curve_param")
            if param:
                for p, xv, yv in zip(curve, xs, ys):
                    if not math.isnan(xv) and not math.isnan(yv):
                        ax.annotate(f"{p['row'][param]:g}", (xv, yv), fontsize=6, color=line[0].get_color())
        if paper is not None:
            _paper_bounds(ax, paper[(paper["pair"] == spec.get("paper_pair", spec["pair"])) & (paper["data"] == data)])
        ax.set(xlabel=X_AXES[x], ylabel="score", title=f"{spec.get('title', spec['name'])} — {data}, m = {spec['m']}")
        ax.legend(fontsize=7)
        ax_kl.set(xlabel=X_AXES[x], ylabel=DIVERGENCES[div], title="divergence from the verifier")
        sink.save(fig, f"{spec['name']}_{data}")
    return notes


def _paper_bounds(ax, rows: pd.DataFrame) -> None:
    """The paper's stated bounds ("Cactus > 86 at ~90 % acceptance") as arrows at their acceptance."""
    for _, r in rows.iterrows():
        up = r["relation"] == ">"
        ax.annotate(
            f"paper: {r['label']} {r['relation']} {r['score']:g}",
            xy=(r["acceptance"], r["score"]),
            xytext=(r["acceptance"], r["score"] + (4 if up else -4)),
            fontsize=6,
            ha="center",
            arrowprops={"arrowstyle": "<-" if up else "->", "lw": 0.8},
        )

"""The paper's figures that a declarative spec drives (sweeps/figure4.yaml, sweeps/lossy_tradeoff.yaml).

A figure spec is a table spec with `figure:` naming its drawing and two extensions:

* `pairs:` several pairs, one panel each (Figure 4's model families). `pair=tiny` maps every family to that
  one pair (each panel then says so), for an offline run.
* a row parameter given as a list (`delta: [0.25, 0.5, 1.0]`) is a curve: one run per value, joined in
  parameter order.

Curves are honest: every point is the run whose full identity matches its cell, error bars are the score's
standard error, a missing run is a gap in its curve and is listed under the figure, and runs of different
settings are never joined (the identity includes sampling, max_gen_toks, engine and seed).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .methods import BASELINE

X_AXES = {
    "acceptance_rate": "acceptance rate (drafts accepted at any position / drafted)",
    "prefix_acceptance": "prefix acceptance (accepted before the first rejection / drafted = AL/m)",
    "accepted_length": "accepted length AL",
}


def expand_rows(rows: list[dict]) -> list[dict]:
    """A row with one list-valued parameter becomes a curve: one row per value, in the list's order."""
    out = []
    for row in rows:
        lists = [k for k, v in row.items() if isinstance(v, list)]
        if len(lists) > 1:
            raise ValueError(f"row {row['label']!r}: one parameter may be a list (a curve), not {lists}")
        if not lists:
            out.append(row)
            continue
        key = lists[0]
        for value in row[key]:
            out.append(
                {
                    **row,
                    key: value,
                    "label": f"{row['label']} {key}={value:g}"
                    if isinstance(value, float)
                    else f"{row['label']} {key}={value}",
                    "curve": row["label"],
                    "curve_param": key,
                }
            )
    return out


def spec_pairs(spec: dict) -> list[tuple[str, str]]:
    """(panel family, pair that runs it): `pairs:` with the `pair=` override mapping every family."""
    families = spec.get("pairs") or [spec["pair"]]
    override = spec.get("pair_override")
    return [(family, override or family) for family in families]


def pair_spec(spec: dict, pair: str) -> dict:
    return {**spec, "pair": pair}


def _points(spec, runs, data, pair, overrides, find_run, compose_cell):
    """One record per row: the run's metrics (None where the run is missing)."""
    sub = pair_spec(spec, pair)
    # composing a cell's config takes Hydra a third of a second: only where a run of this pair and data exists
    runs = [r for r in runs if r.config["pair"]["name"] == pair and r.config["data"]["name"] == data]
    out = []
    for row in spec["rows"]:
        run = find_run(runs, compose_cell(sub, row, data, overrides)) if runs else None
        s = run.summary if run is not None else {}
        out.append(
            {
                "row": row,
                "run": run,
                "score": s.get("score"),
                "stderr": s.get("score_stderr"),
                **{k: s.get(k) for k in X_AXES},
            }
        )
    return out


def cross_architecture(spec, runs, overrides, save, plt, find_run, compose_cell) -> list[str]:
    """Figure 4: score against AL, one panel per family, the verifier's ±1σ band in each."""
    notes = []
    for data in spec["data"]:
        families = spec_pairs(spec)
        panels = [_points(spec, runs, data, pair, overrides, find_run, compose_cell) for _, pair in families]
        if not any(p["run"] is not None for points in panels for p in points):
            notes.append(f"{data}: no stored runs of this figure: nothing drawn")
            continue
        fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.6), squeeze=False)
        for ax, (family, pair), points in zip(axes[0], families, panels):
            for p in points:
                if p["run"] is None:
                    notes.append(f"{data}, {family}: no run for {p['row']['label']} (gap)")
            _verifier_band(ax, [p for p in points if p["row"]["method"] == BASELINE])
            for p, marker in zip([p for p in points if p["row"]["method"] != BASELINE], "osD^vP*X"):
                if p["score"] is None or p["accepted_length"] is None:
                    continue
                ax.errorbar(
                    p["accepted_length"],
                    p["score"],
                    yerr=p["stderr"] or 0,
                    fmt=marker,
                    capsize=2,
                    label=p["row"]["label"],
                )
            title = family if pair == family else f"{family} (run as {pair})"
            ax.set(xlabel="accepted length AL", ylabel="score", title=title)
            ax.legend(fontsize=7)
        fig.suptitle(f"{spec.get('title', spec['name'])} — {data}, m = {spec['m']}", fontsize=9)
        save(fig, f"{spec['name']}_{data}")
    return notes


def lossy_tradeoff(spec, runs, overrides, save, plt, find_run, compose_cell, paper=None) -> list[str]:
    """Score against acceptance, each lossy method a curve through its parameter grid (parameter order)."""
    x = spec.get("x", "acceptance_rate")
    notes = [f"x axis: {X_AXES[x]}"]
    for data in spec["data"]:
        points = _points(spec, runs, data, spec["pair"], overrides, find_run, compose_cell)
        if all(p["run"] is None for p in points):
            notes.append(f"{data}: no stored runs of this figure: nothing drawn")
            continue
        fig, ax = plt.subplots(figsize=(5.6, 4))
        _verifier_band(ax, [p for p in points if p["row"]["method"] == BASELINE])
        curves: dict[str, list] = {}
        for p in points:
            if p["row"]["method"] == BASELINE:
                continue
            curves.setdefault(p["row"].get("curve", p["row"]["label"]), []).append(p)
            if p["run"] is None:
                notes.append(f"{data}: no run for {p['row']['label']} (a gap in its curve)")
        for (name, pts), marker in zip(curves.items(), "osD^vP*X"):
            xs = [p[x] if p["run"] is not None else math.nan for p in pts]  # NaN: matplotlib leaves a gap
            ys = [p["score"] if p["run"] is not None else math.nan for p in pts]
            errs = [p["stderr"] or 0 for p in pts]
            line = ax.errorbar(xs, ys, yerr=errs, fmt=f"{marker}-", capsize=2, label=name)
            param = pts[0]["row"].get("curve_param")
            if param:
                for p, xv, yv in zip(pts, xs, ys):
                    if not math.isnan(xv) and not math.isnan(yv):
                        ax.annotate(f"{p['row'][param]:g}", (xv, yv), fontsize=6, color=line[0].get_color())
        if paper is not None:
            _paper_bounds(ax, paper[(paper["pair"] == spec.get("paper_pair", spec["pair"])) & (paper["data"] == data)])
        ax.set(xlabel=X_AXES[x], ylabel="score", title=f"{spec.get('title', spec['name'])} — {data}, m = {spec['m']}")
        ax.legend(fontsize=7)
        save(fig, f"{spec['name']}_{data}")
    return notes


def _verifier_band(ax, verifier_points) -> None:
    v = next((p for p in verifier_points if p["score"] is not None), None)
    if v is not None:
        sd = v["stderr"] or 0.0
        ax.axhspan(v["score"] - sd, v["score"] + sd, color="grey", alpha=0.25, label="verifier ±1σ")
        ax.axhline(v["score"], color="grey", lw=1)


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


def load_paper_bounds(spec: dict) -> pd.DataFrame | None:
    path = spec.get("paper")
    return pd.read_csv(path) if path and Path(path).exists() else None


DRAWINGS = {"cross_architecture": cross_architecture, "lossy_tradeoff": lossy_tradeoff}

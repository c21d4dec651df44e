"""Figure 1: score (± one standard error) against AL, the verifier alone's ±1σ band behind; beside it, where
the verifier alone's run exists, each method's paired score difference from it with its 95 % interval (the
comparison the claims are about: docs/statistics.md)."""

from __future__ import annotations

import pandas as pd

from cactus_bench.core import metrics
from cactus_bench.tools.report.figures.common import (
    delta_label,
    error_bar,
    figure_family,
    method_label,
    method_styles,
    plt,
    verifier_band,
)


@figure_family("tradeoff", "store")
def draw(sink, name, title, g, ver) -> None:
    """Hollow markers of decreasing size, so methods drawn on the same spot both stay visible; every δ is
    labelled."""
    paired = len(ver) > 0
    fig, axes = plt.subplots(1, 2 if paired else 1, figsize=(10.4 if paired else 5.6, 3.9), squeeze=False)
    ax = axes[0][0]
    if len(ver):
        verifier_band(ax, ver.iloc[0]["score"], ver.iloc[0]["score_stderr"])
    styles = method_styles(g["method"].unique())
    for i, (method, h) in enumerate(g.groupby("method", sort=True)):
        h = h.dropna(subset=["accepted_length", "score"]).sort_values("accepted_length")
        if not len(h):
            continue
        ax.errorbar(
            h["accepted_length"],
            h["score"],
            yerr=h["score_stderr"].fillna(0),
            fmt=styles[method]["marker"],
            color=styles[method]["color"],
            mfc="none",
            ms=11 - 2 * (i % 4),
            mew=1.6,
            capsize=3,
            label=method_label(method),
        )
        for j, (_, r) in enumerate(h.iterrows()):
            if delta_label(r):
                ax.annotate(
                    delta_label(r).strip(),
                    (r["accepted_length"], r["score"]),
                    xytext=(7, 7 if j % 2 == 0 else -11),
                    textcoords="offset points",
                    fontsize=7,
                    color=styles[method]["color"],
                )
    ax.set(xlabel="accepted length AL (drafts accepted per verifier call)", ylabel="score (± 1 s.e.)")
    ax.set_title(f"Score vs AL — {title}", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    if paired:
        _paired_panel(axes[0][1], g, ver.iloc[0]["run"], styles)
    sink.save(fig, f"fig1_tradeoff_{name}")


def _paired_panel(ax, g, ver_run, styles) -> None:
    """Δ score vs the verifier alone on the items both decoded, with its paired 95 % interval, against AL."""
    n = None
    for method, h in g.groupby("method", sort=True):
        for _, r in h.sort_values("accepted_length").iterrows():
            est = metrics.read("score_delta", r["run"].samples, {"baseline": ver_run.samples}).value
            if est is None or pd.isna(r["accepted_length"]):
                continue
            n = est.items
            ax.errorbar(
                [r["accepted_length"]],
                [est.value],
                yerr=[[b] for b in error_bar(est)],
                fmt=styles[method]["marker"],
                color=styles[method]["color"],
                mfc="none",
                capsize=3,
            )
            ax.annotate(
                (method_label(method) + delta_label(r)).strip(),
                (r["accepted_length"], est.value),
                xytext=(6, 4),
                textcoords="offset points",
                fontsize=7,
                color=styles[method]["color"],
            )
    ax.axhline(0, color="grey", lw=1)
    ax.set(xlabel="accepted length AL", ylabel="Δ score vs verifier (points, paired 95 % CI)")
    ax.set_title(f"Paired difference from the verifier alone (n = {n} items)", fontsize=10)

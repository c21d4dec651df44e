"""Figure 2: AL and score of Cactus over δ, points joined in δ order."""

from __future__ import annotations

from .common import plt


def draw(sink, name, title, g, ver) -> None:
    cac = g[g["method"].isin(["cactus", "cactus_exact"])].dropna(subset=["delta"])
    if cac["delta"].nunique() < 2:
        return
    fig, ax1 = plt.subplots(figsize=(5, 3.6))
    ax2 = ax1.twinx()
    for i, (method, h) in enumerate(cac.groupby("method")):
        h = h.sort_values("delta")
        ax1.plot(h["delta"], h["accepted_length"], "o-", color=f"C{2 * i}", label=f"{method} AL")
        ax2.errorbar(
            h["delta"],
            h["score"],
            yerr=h["score_stderr"].fillna(0),
            fmt="s--",
            color=f"C{2 * i + 1}",
            alpha=0.7,
            capsize=3,
            label=f"{method} score (± 1 s.e.)",
        )
    ax1.set(xlabel="δ", ylabel="AL", title=f"δ grid — {title}")
    ax2.set_ylabel("score")
    handles = [h for ax in (ax1, ax2) for h in ax.get_legend_handles_labels()[0]]
    ax1.legend(handles, [h.get_label() for h in handles], loc="best", fontsize=7)
    sink.save(fig, f"fig2_delta_grid_{name}")

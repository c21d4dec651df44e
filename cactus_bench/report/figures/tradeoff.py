"""Figure 1: score (± one standard error) against AL, the verifier alone's ±1σ band behind."""

from __future__ import annotations

from .common import delta_label, method_styles, plt, verifier_band


def draw(sink, name, title, g, ver) -> None:
    """Hollow markers of decreasing size, so methods drawn on the same spot both stay visible; every δ is
    labelled."""
    fig, ax = plt.subplots(figsize=(5.6, 3.9))
    if len(ver):
        verifier_band(ax, ver.iloc[0]["score"], ver.iloc[0]["score_stderr"])
    styles = method_styles(g["method"].unique())
    for i, (method, h) in enumerate(g.groupby("method", sort=True)):
        h = h.sort_values("accepted_length")
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
            label=method,
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
    sink.save(fig, f"fig1_tradeoff_{name}")

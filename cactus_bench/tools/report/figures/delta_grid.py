"""Figure 2: AL and score of Cactus over δ, points joined in δ order; beside it, both KLs over δ: the
target KL (the budget each verification spent, at most δ by construction) and the output KL (how far
what was emitted is from the verifier), so the label says which is which."""

from __future__ import annotations

from cactus_bench.tools.report.figures.common import figure_family, method_label, plt


@figure_family("delta_grid", "store")
def draw(sink, name, title, g, ver) -> None:
    cac = g[g["method"].isin(["cactus", "cactus_exact"])].dropna(subset=["delta"])
    if cac["delta"].nunique() < 2:
        return
    fig, (ax1, ax_kl) = plt.subplots(1, 2, figsize=(10.4, 3.6), gridspec_kw={"wspace": 0.45})
    ax2 = ax1.twinx()
    for i, (registered, h) in enumerate(cac.groupby("method")):
        method = method_label(registered)  # as the tables name it
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
        ax_kl.plot(h["delta"], h["output_kl"], "o-", color=f"C{2 * i}", label=f"{method} output KL(P_out ‖ q)")
        ax_kl.plot(h["delta"], h["target_kl"], "^:", color=f"C{2 * i + 1}", label=f"{method} target KL(h ‖ q)")
    ax_kl.plot(cac["delta"].sort_values(), cac["delta"].sort_values(), color="grey", lw=0.8, label="δ (the bound)")
    ax1.set(xlabel="δ", ylabel="AL", title=f"δ grid — {title}")
    ax2.set_ylabel("score")
    handles = [h for ax in (ax1, ax2) for h in ax.get_legend_handles_labels()[0]]
    ax1.legend(handles, [h.get_label() for h in handles], loc="best", fontsize=7)
    ax_kl.set(xlabel="δ", ylabel="KL per position", title="divergence from the verifier")
    ax_kl.legend(loc="best", fontsize=7)
    sink.save(fig, f"fig2_delta_grid_{name}")

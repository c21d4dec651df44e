"""Acceptance against draft position, one line per method: the conditional acceptance of draft j given
drafts 1..j−1 accepted, and the share of verifier calls that accepted at least j drafts (whose sum over j
is AL), each with its 95 % interval clustered by item."""

from __future__ import annotations

from cactus_bench.tools.report.figures.common import delta_label, figure_family, method_label, method_styles, plt

PANELS = (("acceptance_at", "P(draft j accepted | 1..j−1 accepted)"), ("accepted_at_least", "P(≥ j drafts accepted)"))


@figure_family("positions", "store")
def draw(sink, name, title, g, ver) -> None:
    rows = [r for _, r in g.sort_values(["method", "delta"]).iterrows() if r["run"].summary.get("acceptance_at")]
    if not rows:
        return
    labels = [method_label(r["method"]) + delta_label(r) for r in rows]
    styles = method_styles(set(labels))  # by label: each δ of a method its own marker
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, (key, ylabel) in zip(axes, PANELS):
        for shift, (r, label) in enumerate(zip(rows, labels)):
            s = r["run"].summary
            values, intervals = s[key], s.get(f"{key}_ci") or [None] * len(s[key])
            xs = [j + 1 + 0.04 * (shift - len(rows) / 2) for j in range(len(values))]  # offset: bars stay apart
            below = [v - ci[0] if ci and v is not None else 0.0 for v, ci in zip(values, intervals)]
            above = [ci[1] - v if ci and v is not None else 0.0 for v, ci in zip(values, intervals)]
            ax.errorbar(
                xs, values, yerr=[below, above], capsize=3, lw=1.2,
                label=label, **styles[label],
            )  # fmt: skip
        ax.set(xlabel="draft position j", ylabel=ylabel, ylim=(0, 1.02))
        ax.set_xticks(range(1, max(len(r["run"].summary[key]) for r in rows) + 1))
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Acceptance per draft position — {title} (95 % intervals over items)", fontsize=10)
    fig.tight_layout()
    sink.save(fig, f"positions_{name}")

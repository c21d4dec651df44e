"""Acceptance against draft position, one line per method: the conditional acceptance of draft j given
drafts 1..j−1 accepted, and the share of verifier calls that accepted at least j drafts (whose sum over j
is AL), each with its 95 % interval clustered by item. A position no round reached has no point, and one
whose interval is withheld (too few items) no bar: the figure's notes say which."""

from __future__ import annotations

from cactus_bench.tools.report.figures.common import delta_label, figure_family, method_label, method_styles, plt

PANELS = (("acceptance_at", "P(draft j accepted | 1..j−1 accepted)"), ("accepted_at_least", "P(≥ j drafts accepted)"))


def drawable(values: list, intervals: list | None) -> tuple[list[tuple[int, float, float, float]], list[str]]:
    """The positions that have a value, as (j, value, below, above) with a zero bar where the interval is
    withheld; and what was left out, in words."""
    intervals = list(intervals or [])
    points, unreached, withheld = [], [], []
    for j, value in enumerate(values, 1):
        ci = intervals[j - 1] if j - 1 < len(intervals) else None
        if value is None:
            unreached.append(j)
        elif ci is None or None in ci:
            withheld.append(j)
            points.append((j, value, 0.0, 0.0))
        else:
            points.append((j, value, value - ci[0], ci[1] - value))
    said = [f"no round reached position(s) {', '.join(map(str, unreached))}: no point"] if unreached else []
    if withheld:
        said.append(f"interval withheld at position(s) {', '.join(map(str, withheld))} (too few items): no bar")
    return points, said


@figure_family("positions", "store")
def draw(sink, name, title, g, ver) -> None:
    rows = [r for _, r in g.sort_values(["method", "delta"]).iterrows() if r["run"].summary.get("acceptance_at")]
    if not rows:
        return
    labels = [method_label(r["method"]) + delta_label(r) for r in rows]
    styles = method_styles(set(labels))  # by label: each δ of a method its own marker
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    notes: list[str] = []
    for ax, (key, ylabel) in zip(axes, PANELS):
        for shift, (r, label) in enumerate(zip(rows, labels)):
            s = r["run"].summary
            points, said = drawable(s.get(key) or [], s.get(f"{key}_ci"))
            notes += [f"{label}, {key}: {line}" for line in said]
            if not points:
                continue
            offset = 0.04 * (shift - len(rows) / 2)  # bars of several methods stay apart
            ax.errorbar(
                [j + offset for j, *_ in points], [v for _, v, _, _ in points],
                yerr=[[b for *_, b, _ in points], [a for *_, a in points]], capsize=3, lw=1.2,
                label=label, **styles[label],
            )  # fmt: skip
        ax.set(xlabel="draft position j", ylabel=ylabel, ylim=(0, 1.02))
        ax.set_xticks(range(1, max(len(r["run"].summary.get(key) or []) for r in rows) + 1))
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Acceptance per draft position — {title} (95 % intervals over items)", fontsize=10)
    fig.tight_layout()
    sink.save(fig, f"positions_{name}")
    if notes:
        sink.notes(f"positions_{name}", notes)

"""Figure 3: wall-time speedup over the verifier alone, with its 95 % interval (paired timing where stored)."""

from __future__ import annotations

from cactus_bench.app.runs import Run
from cactus_bench.core import metrics
from cactus_bench.tools.report.figures.common import (
    CAVEAT_MARK,
    delta_label,
    error_bar,
    figure_family,
    method_label,
    plt,
)


def speedup_of(run: Run, ar_run: Run) -> tuple[metrics.Reading, str]:
    """The paired speedup where the run has paired times, else the task-time ratio against the separate
    verifier-alone run; each with its 95 % interval (Fieller's) and its timing caveat (`metrics.read`: the
    same reading the tables print; a withheld value is None), and which one it is."""
    paired = metrics.read("paired_speedup", run.samples)
    if paired.value is not None or paired.withheld:
        return paired, "paired"
    return metrics.read("speedup", run.samples, {"baseline": ar_run.samples}), "task time"


@figure_family("speedup", "store")
def draw(sink, name, title, g, ver) -> None:
    if not len(ver):
        return
    ar_run = ver.iloc[0]["run"]
    labels, values, lows, highs, kinds, caveats = [], [], [], [], set(), []
    for _, r in g.sort_values(["method", "delta"]).iterrows():
        reading, kind = speedup_of(r["run"], ar_run)
        label = method_label(r["method"]) + delta_label(r)
        if reading.caveat is not None:
            caveats.append(f"{label}: {reading.caveat}")
        est = reading.value
        if est is not None:
            labels.append(label + (f" {CAVEAT_MARK}" if reading.flagged else ""))
            values.append(est.value)
            below, above = error_bar(est)
            lows.append(below)
            highs.append(above)
            kinds.add(kind)
    if caveats:
        sink.notes(f"fig3_speedup_{name}", caveats)
    if not values:
        return
    fig, ax = plt.subplots(figsize=(6.2, 0.5 * len(values) + 1.4))
    ax.barh(labels, values, xerr=[lows, highs], capsize=4, color="C0", alpha=0.8)
    for y, (v, up) in enumerate(zip(values, highs)):
        ax.annotate(f"{v:.2f}×", (v + up, y), xytext=(5, -3), textcoords="offset points", fontsize=7)
    ax.axvline(1.0, color="k", lw=1)
    ax.invert_yaxis()
    ax.set(xlabel=f"speedup over the verifier alone ({' / '.join(sorted(kinds))}; 95 % interval)")
    ax.set_title(f"Speedup — {title}", fontsize=10)
    if caveats:  # on the figure itself, as the tables print it under theirs
        fig.text(0, -0.02, "\n".join(f"{CAVEAT_MARK} {c}" for c in caveats), fontsize=6, va="top", wrap=True)
    sink.save(fig, f"fig3_speedup_{name}")

"""Figure 3: wall-time speedup over the verifier alone against AL, with the speedup's 95 % interval (paired
timing where stored): a point per method, the verifier alone at AL 0 and 1×, and the items it was timed on."""

from __future__ import annotations

import pandas as pd

from cactus_bench.app.runs import Run
from cactus_bench.core import metrics
from cactus_bench.tools.report.figures.common import (
    CAVEAT_MARK,
    delta_label,
    error_bar,
    figure_family,
    method_label,
    method_styles,
    plt,
)


def speedup_of(run: Run, ar_run: Run) -> tuple[metrics.Reading, str]:
    """The paired speedup where the run has paired times, else the task-time ratio against the separate
    verifier-alone run; each with its 95 % interval (Fieller's) and its timing caveat (`metrics.read`: the
    same reading the tables print; a withheld value is None), and which one it is."""
    paired = metrics.read("paired_speedup", run.samples)
    if paired.value is not None or paired.withheld:
        return paired, "paired, ratio of totals"
    return metrics.read("speedup", run.samples, {"baseline": ar_run.samples}), "task time"


@figure_family("speedup", "store")
def draw(sink, name, title, g, ver) -> None:
    if not len(ver):
        return
    ar_run = ver.iloc[0]["run"]
    points, kinds, caveats, timed, intervals = [], set(), [], set(), False
    for _, r in g.sort_values(["method", "delta"]).iterrows():
        reading, kind = speedup_of(r["run"], ar_run)
        label = method_label(r["method"]) + delta_label(r)
        if reading.caveat is not None:
            caveats.append(f"{label}: {reading.caveat}")
        est, al = reading.value, r["accepted_length"]
        if est is None or pd.isna(al):
            continue
        # the value in the legend, not beside the point: points at nearby AL and speedup would print over each other
        shown = f"{label} {est.value:.2f}×" + (f" {CAVEAT_MARK}" if reading.flagged else "")
        points.append((r["method"], shown, al, est))
        kinds.add(kind)
        timed.add(est.items)
        intervals = intervals or est.low is not None
    if caveats:
        sink.notes(f"fig3_speedup_{name}", caveats)
    if not points:
        return
    styles = method_styles({p[1] for p in points})  # by label: each δ of a method its own marker
    fig, ax = plt.subplots(figsize=(6.2, 4.2))
    ax.plot([0], [1.0], "k*", ms=11, label="verifier alone (1×)")
    for _, label, al, est in points:
        below, above = error_bar(est)
        ax.errorbar([al], [est.value], yerr=[[below], [above]], capsize=4, ls="none", label=label, **styles[label])
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    what = " / ".join(sorted(kinds)) + ("; 95 % interval" if intervals else "; too few items for an interval")
    ax.set(
        xlabel="AL (Σ rounds): drafts accepted per verifier call", ylabel=f"speedup over the verifier alone\n({what})"
    )
    ax.legend(fontsize=7, loc="best")
    n = "/".join(str(k) for k in sorted(timed))
    ax.set_title(f"Speedup against AL — {title}; speedup timed on n={n}", fontsize=9)
    if caveats:  # on the figure itself, as the tables print it under theirs, clear of the axis label
        fig.text(0, -0.08, "\n".join(f"{CAVEAT_MARK} {c}" for c in caveats), fontsize=6, va="top", wrap=True)
    sink.save(fig, f"fig3_speedup_{name}")

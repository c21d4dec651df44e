"""Spec-Bench: speedup over the verifier alone per category (Spec-Bench's ratio of mean speeds)."""

from __future__ import annotations

from cactus_bench.adapters.benchmarks import specbench
from cactus_bench.tools.report.figures.common import CAVEAT_MARK, figure_family, method_label, plt


@figure_family("specbench_speedup", "store")
def draw(sink, name, title, g, ver) -> None:
    if not len(ver):
        return
    ar_run = ver.iloc[0]["run"]
    methods = list(g["run"])
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    width = 0.8 / max(len(methods), 1)
    cats = [*specbench.SUBTASKS, "overall"]
    caveats = []
    for i, r in enumerate(methods):
        table = specbench.speed_metrics(r.samples, ar_run.samples)
        label = method_label(r.identity.method) + "".join(f" {k}={v}" for k, v in sorted(r.identity.params.items()))
        caveats += sorted(
            {f"{label}: {v[1]}" for c in cats for k, v in table.get(c, {}).items() if k == "speedup_caveat"}
        )
        ax.bar(
            [j + i * width for j in range(len(cats))],
            [table.get(c, {}).get("speedup") or 0 for c in cats],  # a withheld speedup: no bar, its note says why
            width,
            label=label,
        )
    if caveats:
        sink.notes(f"fig_{name}", caveats)
        fig.text(0, -0.02, "\n".join(f"{CAVEAT_MARK} {c}" for c in caveats), fontsize=6, va="top", wrap=True)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))], cats, rotation=30, fontsize=8)
    ax.axhline(1.0, color="k", lw=1)
    ax.set(ylabel="speedup (ratio of mean speeds)", title=f"Spec-Bench speedup per category — {title}")
    ax.legend(fontsize=7)
    sink.save(fig, f"fig_{name}")

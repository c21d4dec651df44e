"""Figure 4 (sweeps/figure4.yaml): score against AL, one panel per model family, the verifier's ±1σ band
in each."""

from __future__ import annotations

from cactus_bench.app.runs import Run
from cactus_bench.core.methods import is_baseline
from cactus_bench.tools.report.figures.common import figure_family, plt, verifier_band
from cactus_bench.tools.report.figures.spec_points import points
from cactus_bench.tools.report.specs import spec_pairs


@figure_family("cross_architecture", "spec")
def draw(sink, spec: dict, runs: list[Run], overrides: list[str]) -> list[str]:
    notes = []
    for data in spec["data"]:
        families = spec_pairs(spec)
        panels = [points(spec, runs, data, pair, overrides) for _, pair in families]
        if not any(p["run"] is not None for pts in panels for p in pts):
            notes.append(f"{data}: no stored runs of this figure: nothing drawn")
            continue
        fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.6), squeeze=False)
        for ax, (family, pair), pts in zip(axes[0], families, panels):
            for p in pts:
                if p["run"] is None:
                    notes.append(f"{data}, {family}: no run for {p['row']['label']} (gap)")
            ver = next((p for p in pts if is_baseline(p["row"]["method"]) and p["score"] is not None), None)
            if ver is not None:
                verifier_band(ax, ver["score"], ver["stderr"], "verifier ±1σ")
            for p, marker in zip([p for p in pts if not is_baseline(p["row"]["method"])], "osD^vP*X"):
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
        sink.save(fig, f"{spec['name']}_{data}")
    return notes

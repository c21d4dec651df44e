"""The serving sweep's figures, drawn from its table rows (`serving.table_rows`): a Pareto of tokens/s per
request against total tokens/s (a curve per method, each point its batch size at that batch size's best m),
and the speedup over the verifier alone against batch size (at the best m, with its interval)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from cactus_bench.tools.perf.serving import VERIFIER, best_m  # noqa: E402


def curves(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(engine, method) -> its rows by batch size: the verifier alone's, and each method's at its best m."""
    best = best_m(rows)
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["m"] is None or best[(r["engine"], r["method"], r["batch"])] == r["m"]:
            out.setdefault((r["engine"], r["method"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["batch"]) for k, v in out.items()}


def draw(rows: list[dict], out_dir: Path | str, title: str, stem: str = "serving") -> dict[str, Path]:
    """Write <stem>_pareto.png and <stem>_speedup.png into out_dir; returns them by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = curves(rows)
    paths = {}

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for (engine, method), pts in lines.items():
        xs, ys = [r["tokens_per_s"] for r in pts], [r["tokens_per_s_per_request"] or 0 for r in pts]
        ax.plot(xs, ys, label=f"{method} ({engine})", **style(lines, engine, method))
        for r, x, y in zip(pts, xs, ys):
            tag = f"B={r['batch']}" + (f", m={r['m']}" if r["m"] else "")
            ax.annotate(tag, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    paths["pareto"] = save(
        fig, ax, "total tokens/s (all requests)", "tokens/s per request (1 / median TPOT)",
        f"{title}: Pareto (best m per batch size)", out_dir / f"{stem}_pareto.png",
    )  # fmt: skip

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="verifier alone (1×)")
    for (engine, method), pts in lines.items():
        pts = [r for r in pts if r.get("speedup")]
        if method == VERIFIER or not pts:
            continue
        xs = [r["batch"] for r in pts]
        ys = [r["speedup"][0] for r in pts]
        lo = [r["speedup"][0] - (r["speedup"][1] or r["speedup"][0]) for r in pts]
        hi = [(r["speedup"][2] or r["speedup"][0]) - r["speedup"][0] for r in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, label=f"{method} ({engine})", **style(lines, engine, method))
        for r, x, y in zip(pts, xs, ys):
            ax.annotate(f"m={r['m']}", (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.set_xscale("log", base=2)
    batches = sorted({r["batch"] for r in rows})
    ax.set_xticks(batches, [str(b) for b in batches])
    paths["speedup"] = save(
        fig, ax, "batch size B", "speedup vs verifier alone at B (95 % CI)",
        f"{title}: speedup against batch size (best m)", out_dir / f"{stem}_speedup.png",
    )  # fmt: skip
    return paths


ENGINE_STYLES = {"eager": ("-", "o"), "fast": ("--", "s"), "vllm": (":", "^")}


def style(lines: dict, engine: str, method: str) -> dict:
    """A method's colour (the verifier alone black) and an engine's line and marker, the same in both figures."""
    methods = list(dict.fromkeys(m for _, m in lines if m != VERIFIER))
    color = "black" if method == VERIFIER else f"C{methods.index(method) % 10}"
    linestyle, marker = ENGINE_STYLES.get(engine, ("-.", "D"))
    return {"color": color, "linestyle": linestyle, "marker": marker}


def save(fig, ax, xlabel: str, ylabel: str, title: str, path: Path) -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

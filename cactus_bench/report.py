"""Tables and figures from stored runs, with the paper's numbers beside ours.

    python -m cactus_bench.report table sweeps/table1.yaml     # CSV, Markdown, LaTeX under results/tables
    python -m cactus_bench.report figures                      # PNG + PDF under results/figures

A table spec (sweeps/*.yaml) names the pair, m, seed, datasets, rows (method + parameters) and columns;
Rej and speedup use the SpS and verifier-alone runs of the same pair/data/m/seed, and the table says
when a reference run is missing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from . import metrics
from .benchmarks import specbench
from .methods import BASELINE, is_baseline

RESULTS = Path(os.environ.get("CACTUS_BENCH_RESULTS", "results"))


@dataclass
class Run:
    folder: Path
    config: dict
    summary: dict
    _samples: list | None = field(default=None, repr=False)

    @property
    def samples(self) -> list[dict]:
        if self._samples is None:
            path = self.folder / "samples.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            self._samples = [json.loads(x) for x in lines if x.strip()]
        return self._samples

    @property
    def is_baseline(self) -> bool:
        return is_baseline(self.config["method"]["name"])

    def matches(self, pair: str, data: str, method: str, params: dict, m: int | None, seed: int) -> bool:
        c = self.config
        if (c["pair"]["name"], c["data"]["name"], c["method"]["name"], c["seed"]) != (pair, data, method, seed):
            return False
        if not is_baseline(method) and m is not None and c["m"] != m:
            return False
        return all(c["method"]["params"].get(k) == v for k, v in params.items())


def load_runs(results_dir: Path | str = RESULTS / "runs") -> list[Run]:
    runs = []
    for summary in sorted(Path(results_dir).glob("**/summary.json")):
        folder = summary.parent
        config = yaml.safe_load((folder / "config.yaml").read_text())
        runs.append(Run(folder, config, json.loads(summary.read_text())))
    return runs


def find(runs: list[Run], pair, data, method, params=None, m=None, seed=0) -> Run | None:
    hits = [r for r in runs if r.matches(pair, data, method, params or {}, m, seed)]
    return max(hits, key=lambda r: (r.summary.get("samples", 0), r.folder.stat().st_mtime)) if hits else None


def row_params(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("label", "method")}


def load_spec(path: str | Path, overrides: dict | None = None) -> dict:
    """A table spec with overrides applied; the paper's column keeps referring to the paper's own pair."""
    spec = yaml.safe_load(Path(path).read_text())
    spec.setdefault("paper_pair", spec["pair"])
    spec.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return spec


def cell_values(run: Run | None, sps: Run | None, ar: Run | None) -> dict:
    """Every metric one table cell can show for a run: its summary's, and the relative ones against the
    reference runs (SpS for Rej, the verifier alone for speedup) where those exist."""
    if run is None:
        return {}
    s = run.summary
    out = {m.name: s.get(m.name) for m in metrics.METRICS.values() if m.relative is None}
    out["score_stderr"] = s.get("score_stderr")
    if run.is_baseline:
        out.update(accepted_length=None, tau=1.0)
        return out
    refs = {"sps": sps.samples if sps is not None else None, "baseline": ar.samples if ar is not None else None}
    for m in metrics.METRICS.values():
        if m.relative is not None:
            out[m.name] = metrics.relative(m, run.samples, refs)
    return out


def build_table(spec: dict, runs: list[Run]) -> tuple[pd.DataFrame, list[str]]:
    """Long-form table: one row per (data, method row, metric) with ours, the paper's and the difference."""
    paper = pd.read_csv(spec["paper"]) if spec.get("paper") and Path(spec["paper"]).exists() else None
    records, notes = [], []
    for data in spec["data"]:
        ref = {"pair": spec["pair"], "data": data, "seed": spec.get("seed", 0)}
        sps = find(runs, method="sps", m=spec["m"], **ref)
        ar = find(runs, method=BASELINE, **ref)
        if sps is None:
            notes.append(f"{data}: no SpS run (pair {spec['pair']}, m={spec['m']}): Rej not computed")
        if ar is None:
            notes.append(f"{data}: no verifier-alone (ar) run: speedup not computed")
        for row in spec["rows"]:
            run = find(runs, method=row["method"], params=row_params(row), m=spec["m"], **ref)
            if run is None:
                notes.append(f"{data}: no run for {row['label']}")
            if spec.get("kind") == "specbench":
                records += _specbench_records(spec, data, row, run, ar, paper)
                continue
            values = cell_values(run, sps, ar)
            for col in spec["columns"]:
                records.append(
                    {
                        "data": data,
                        "label": row["label"],
                        "metric": col,
                        "ours": values.get(col),
                        "stderr": values.get("score_stderr") if col == "score" else None,
                        "paper": _paper_value(paper, spec, data, row, col),
                    }
                )
    df = pd.DataFrame.from_records(records, columns=["data", "label", "metric", "ours", "stderr", "paper"])
    df["diff"] = pd.to_numeric(df["ours"], errors="coerce") - pd.to_numeric(df["paper"], errors="coerce")
    return df, notes


def _paper_value(paper, spec, data, row, col, category=None):
    if paper is None or col not in paper.columns:
        return None
    pair = spec.get("paper_pair", spec["pair"])
    sel = paper[(paper["pair"] == pair) & (paper["data"] == data) & (paper["method"] == row["method"])]
    if "delta" in row:
        sel = sel[pd.to_numeric(sel["delta"], errors="coerce") == row["delta"]]
    if category is not None:
        sel = sel[sel["category"] == category]
    vals = sel[col].dropna()
    return float(vals.iloc[0]) if len(vals) else None


def _specbench_records(spec, data, row, run, ar, paper):
    if run is None:
        return []
    table = specbench.speed_metrics(run.samples, ar.samples if ar is not None else None)
    out = []
    for category, vals in table.items():
        for col in spec["columns"]:
            ours = 1.0 if (run.is_baseline and col == "speedup") else vals.get(col)
            out.append(
                {
                    "data": category,
                    "label": row["label"],
                    "metric": col,
                    "ours": ours,
                    "stderr": None,
                    "paper": _paper_value(paper, spec, data, row, col, category),
                }
            )
    return out


def _fmt(x, metric):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return metrics.METRICS.get(metric).format(x) if metric in metrics.METRICS else f"{x:.3g}"


def _label(metric: str) -> str:
    return metrics.METRICS.get(metric).label if metric in metrics.METRICS else metric


def wide(df: pd.DataFrame) -> pd.DataFrame:
    """Rows = method labels, columns = (data, metric) with 'ours (paper)'."""

    def cell(r):
        text = _fmt(r["ours"], r["metric"])
        if r["stderr"] is not None and not pd.isna(r["stderr"]) and r["ours"] is not None:
            text += f" ± {r['stderr']:.1f}"
        if r["paper"] is not None and not pd.isna(r["paper"]):
            text += f" ({_fmt(r['paper'], r['metric'])})"
        return text

    df = df.assign(cell=df.apply(cell, axis=1), column=df["data"] + " " + df["metric"].map(_label))
    order = list(dict.fromkeys(df["label"]))
    return df.pivot(index="label", columns="column", values="cell").reindex(order)[list(dict.fromkeys(df["column"]))]


def render_table(spec: dict, runs: list[Run], out_dir: Path | str = RESULTS / "tables") -> tuple[str, Path]:
    df, notes = build_table(spec, runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = out / spec["name"]
    df.to_csv(base.with_suffix(".csv"), index=False)
    table = wide(df)
    md = f"## {spec.get('title', spec['name'])}\n\n"
    if spec.get("paper"):
        md += f"ours (paper) — paper numbers from `{spec['paper']}`\n\n"
    md += table.to_markdown() + "\n"
    if notes:
        md += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    base.with_suffix(".md").write_text(md)
    base.with_suffix(".tex").write_text(table.to_latex(escape=True))
    return md, base.with_suffix(".md")


# --- figures ------------------------------------------------------------------------------------------


def _runs_frame(runs: list[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        s, c = r.summary, r.config
        rows.append(
            {
                "pair": c["pair"]["name"],
                "data": c["data"]["name"],
                "method": c["method"]["name"],
                "baseline": r.is_baseline,
                "delta": c["method"]["params"].get("delta"),
                "m": c["m"],
                "seed": c["seed"],
                "score": s.get("score"),
                "score_stderr": s.get("score_stderr"),
                "accepted_length": s.get("accepted_length"),
                "tokens_per_s": s.get("tokens_per_s"),
                "run": r,
            }
        )
    return pd.DataFrame(rows)


def figures(runs: list[Run], out_dir: Path | str = RESULTS / "figures") -> dict[str, Path]:
    """Figure 1 (score vs AL with the verifier's ±1σ band), Figure 2 (δ grid), Figure 3 (wall-time
    speedup), and Spec-Bench per-category speedup — one PNG + PDF each, for what the runs cover."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = _runs_frame(runs)
    made = {}

    def save(fig, name):
        for ext in ("png", "pdf"):
            fig.savefig(out / f"{name}.{ext}", bbox_inches="tight", dpi=130)
        plt.close(fig)
        made[name] = out / f"{name}.png"

    task_runs = df[df["data"] != "specbench"] if len(df) else df
    for (pair, data), g in task_runs.groupby(["pair", "data"]) if len(task_runs) else []:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        ver = g[g["baseline"]]
        if len(ver) and ver["score"].notna().any():
            v = ver.iloc[0]
            sd = v["score_stderr"] or 0.0
            ax.axhspan(v["score"] - sd, v["score"] + sd, color="grey", alpha=0.25, label="verifier ±1σ")
            ax.axhline(v["score"], color="grey", lw=1)
        for method, h in g[~g["baseline"]].groupby("method"):
            ax.errorbar(
                h["accepted_length"], h["score"], yerr=h["score_stderr"].fillna(0), fmt="o", label=method, capsize=2
            )
            for _, r in h.iterrows():
                if r["delta"] is not None and not pd.isna(r["delta"]):
                    ax.annotate(f"δ={r['delta']:g}", (r["accepted_length"], r["score"]), fontsize=7)
        ax.set(xlabel="accepted length AL", ylabel="score", title=f"Score vs AL — {data} ({pair})")
        ax.legend(fontsize=7)
        save(fig, f"fig1_tradeoff_{data}_{pair}")

        cac = g[g["method"].isin(["cactus", "cactus_exact"])].dropna(subset=["delta"])
        if cac["delta"].nunique() > 1:
            fig, ax1 = plt.subplots(figsize=(5, 3.6))
            for method, h in cac.groupby("method"):
                h = h.sort_values("delta")
                ax1.plot(h["delta"], h["accepted_length"], "o-", label=f"{method} AL")
            ax2 = ax1.twinx()
            for method, h in cac.groupby("method"):
                h = h.sort_values("delta")
                ax2.plot(h["delta"], h["score"], "s--", alpha=0.6, label=f"{method} score")
            ax1.set(xlabel="δ", ylabel="AL", title=f"δ grid — {data} ({pair})")
            ax2.set_ylabel("score")
            ax1.legend(loc="upper left", fontsize=7)
            save(fig, f"fig2_delta_grid_{data}_{pair}")

        ar_run = find(runs, pair, data, BASELINE, seed=int(g["seed"].iloc[0]))
        if ar_run is not None and len(g[~g["baseline"]]):
            labels, values = [], []
            for _, r in g[~g["baseline"]].iterrows():
                sp = metrics.speedups(r["run"].samples, ar_run.samples)
                if sp and sp["throughput"]:
                    labels.append(
                        r["method"]
                        + (f" δ={r['delta']:g}" if r["delta"] is not None and not pd.isna(r["delta"]) else "")
                        + f" m={r['m']}"
                    )
                    values.append(sp["throughput"])
            if values:
                fig, ax = plt.subplots(figsize=(5, 3.2))
                ax.barh(labels, values)
                ax.axvline(1.0, color="k", lw=1)
                ax.set(xlabel="wall-time speedup over the verifier alone", title=f"Speedup — {data} ({pair})")
                save(fig, f"fig3_speedup_{data}_{pair}")

    spec_runs = df[df["data"] == "specbench"] if len(df) else df
    for pair, g in spec_runs.groupby("pair") if len(spec_runs) else []:
        ar_run = next((r for r in g["run"] if r.is_baseline), None)
        if ar_run is None:
            continue
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        methods = [r for r in g["run"] if not r.is_baseline]
        width = 0.8 / max(len(methods), 1)
        cats = [*specbench.SUBTASKS, "overall"]
        for i, r in enumerate(methods):
            table = specbench.speed_metrics(r.samples, ar_run.samples)
            ax.bar(
                [j + i * width for j in range(len(cats))],
                [table.get(c, {}).get("speedup", 0) for c in cats],
                width,
                label=r.folder.name.split("_s")[0],
            )
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))], cats, rotation=30, fontsize=8)
        ax.axhline(1.0, color="k", lw=1)
        ax.set(ylabel="speedup", title=f"Spec-Bench speedup per category ({pair})")
        ax.legend(fontsize=7)
        save(fig, f"fig_specbench_{pair}")
    return made


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["table", "figures"])
    ap.add_argument("spec", nargs="?", help="table spec (sweeps/*.yaml) for `table`")
    ap.add_argument("--results", default=str(RESULTS / "runs"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--pair", default=None, help="override the spec's pair (e.g. tiny)")
    args = ap.parse_args(argv)
    runs = load_runs(args.results)
    if args.what == "table":
        if not args.spec:
            ap.error("`table` needs a spec, e.g. sweeps/table1.yaml")
        md, path = render_table(load_spec(args.spec, {"pair": args.pair}), runs, args.out or RESULTS / "tables")
        print(md)
        print(f"written: {path.with_suffix('')}.{{csv,md,tex}}")
    else:
        made = figures(runs, args.out or RESULTS / "figures")
        print("\n".join(str(p) for p in made.values()) or "no runs to plot")


if __name__ == "__main__":
    main()

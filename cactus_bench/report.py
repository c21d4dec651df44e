"""Tables and figures from stored runs, with the paper's numbers beside ours.

    python -m cactus_bench.report table sweeps/table1.yaml     # CSV, Markdown, LaTeX under results/tables
    python -m cactus_bench.report figures                      # PNG + PDF under results/figures

A table spec (sweeps/*.yaml) names the pair, m, seed, datasets, rows (method + parameters) and columns.
Each cell is the stored run whose full identity (pair, data and subset, method and every parameter, m,
sampling, max_gen_toks, engine, seed: the run key) equals the composed config of that cell; Rej and
speedup use the SpS and verifier-alone runs composed the same way, and the table says when one is missing.
Figures never join runs of different settings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd
import yaml
from omegaconf import DictConfig, OmegaConf

from . import metrics
from .app.config import CONF_DIR, identity, run_key
from .app.store import read_samples
from .benchmarks import specbench
from .figure_specs import DRAWINGS, expand_rows, load_paper_bounds
from .methods import BASELINE, is_baseline
from .utils import write_text_atomic

log = logging.getLogger("cactus_bench")

RESULTS = Path(os.environ.get("CACTUS_BENCH_RESULTS", "results"))


@dataclass
class Run:
    folder: Path
    config: dict
    summary: dict
    _samples: list | None = field(default=None, repr=False)

    @property
    def samples(self) -> list[dict]:
        """Every shard's samples, each item once (a reader never repairs or counts twice)."""
        if self._samples is None:
            self._samples = read_samples(self.folder)
        return self._samples

    @property
    def is_baseline(self) -> bool:
        return is_baseline(self.config["method"]["name"])

    @property
    def key(self) -> str:
        """The run key: a hash of the run's full identity (`app.config.identity`)."""
        return self.summary.get("run_key") or self.folder.name.rsplit("_", 1)[-1]

    @cached_property
    def identity(self) -> dict:
        return identity(OmegaConf.create(self.config))

    @property
    def data_label(self) -> str:
        d = self.config["data"]
        return d.get("label") or d["name"] + (f"_{d['subset']}" if d.get("subset") else "")

    def setting(self) -> str:
        """What every run of one figure shares: the identity without the method, its parameters and m."""
        rest = {k: v for k, v in self.identity.items() if k not in ("method", "params", "m")}
        return hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()[:6]


class AmbiguousRuns(ValueError):
    """Two stored runs have the same identity (a copied folder): a table cannot choose between them."""


def load_runs(results_dir: Path | str = RESULTS / "runs") -> list[Run]:
    runs = []
    for summary in sorted(Path(results_dir).glob("**/summary.json")):
        folder = summary.parent
        config = yaml.safe_load((folder / "config.yaml").read_text())
        runs.append(Run(folder, config, json.loads(summary.read_text())))
    return runs


def find_run(runs: list[Run], cfg: DictConfig) -> Run | None:
    """The stored run of exactly this config (its full identity), None if there is none."""
    key = run_key(cfg)
    hits = [r for r in runs if r.key == key]
    if len(hits) > 1:
        raise AmbiguousRuns(
            f"{len(hits)} stored runs have the identity of {cfg.method.name} on {cfg.data.label} ({key}): "
            f"{hits[0].folder} and {hits[1].folder}. Keep one (move the other out of the results folder)."
        )
    return hits[0] if hits else None


def run_overrides(spec: dict, row: dict, data: str) -> list[str]:
    """The Hydra overrides of one table cell (what `sweep` runs and what the table looks up)."""
    out = [
        f"pair={spec['pair']}",
        f"data={data}",
        f"method={row['method']}",
        f"m={spec['m']}",
        f"seed={spec.get('seed', 0)}",
        f"experiment_name={spec['name']}",
    ]
    for key, value in row_params(row).items():
        out.append(f"delta={value}" if key == "delta" else f"method.params.{key}={value}")
    for key in ("limit", "max_gen_toks", "paired_timing"):
        if spec.get(key) is not None:
            out.append(f"{key}={spec[key]}")
    return out


def compose_cell(spec: dict, row: dict, data: str, overrides: list[str] = ()) -> DictConfig:
    """The config of one table cell: the spec's overrides, then the caller's (e.g. sampling=greedy)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=run_overrides(spec, row, data) + list(overrides))


ROW_KEYS = ("label", "method", "curve", "curve_param")  # what a spec row says besides the rule's parameters


def row_params(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ROW_KEYS}


def load_spec(path: str | Path, overrides: dict | None = None) -> dict:
    """A table or figure spec with overrides applied; the paper's column keeps referring to the paper's own
    pair. List-valued row parameters become curves (one row per value); with `pairs:` (a figure over model
    families) a `pair` override maps every family to that pair."""
    spec = yaml.safe_load(Path(path).read_text())
    spec.setdefault("paper_pair", spec["pair"])
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if spec.get("pairs") and "pair" in overrides:
        spec["pair_override"] = overrides["pair"]
    spec.update(overrides)
    spec["rows"] = expand_rows(spec["rows"])
    return spec


def cell_values(run: Run | None, sps: Run | None, ar: Run | None) -> dict:
    """Every metric one table cell can show for a run: its summary's, and the relative ones against the
    reference runs (SpS for Rej, the verifier alone for speedup) where those exist."""
    if run is None:
        return {}
    s = run.summary
    out = {m.name: s.get(m.name) for m in metrics.METRICS.values() if m.relative is None}
    out.update({f"{m.name}_ci": s.get(f"{m.name}_ci") for m in metrics.METRICS.values() if m.sampled})
    out["score_stderr"] = s.get("score_stderr")
    if run.is_baseline:
        out.update(accepted_length=None, tau=1.0)
        return out
    refs = {"sps": sps.samples if sps is not None else None, "baseline": ar.samples if ar is not None else None}
    for m in metrics.METRICS.values():
        if m.relative is not None:
            out.update(metrics.flatten(m.name, metrics.relative(m, run.samples, refs)))
    return out


def build_table(spec: dict, runs: list[Run], overrides: list[str] = ()) -> tuple[pd.DataFrame, list[str]]:
    """Long-form table: one row per (data, method row, metric) with ours, the paper's and the difference.
    `overrides` are the Hydra overrides the runs were made with beyond the spec's (as given to `sweep`)."""
    paper = pd.read_csv(spec["paper"]) if spec.get("paper") and Path(spec["paper"]).exists() else None
    records, notes = [], []
    for data in spec["data"]:
        sps = find_run(runs, compose_cell(spec, {"method": "sps"}, data, overrides))
        ar = find_run(runs, compose_cell(spec, {"method": BASELINE}, data, overrides))
        if sps is None:
            notes.append(f"{data}: no SpS run (pair {spec['pair']}, m={spec['m']}): Rej not computed")
        if ar is None:
            notes.append(f"{data}: no verifier-alone (ar) run: speedup not computed")
        for row in spec["rows"]:
            run = find_run(runs, compose_cell(spec, row, data, overrides))
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
                        "ci": values.get(f"{col}_ci"),
                        **_paper_cell(paper, spec, data, row, col),
                    }
                )
    columns = ["data", "label", "metric", "metric_label", "ours", "stderr", "ci", "paper", "paper_confidence"]
    df = pd.DataFrame.from_records(records, columns=columns)
    df["diff"] = pd.to_numeric(df["ours"], errors="coerce") - pd.to_numeric(df["paper"], errors="coerce")
    return df, notes


def _paper_value(paper, spec, data, row, col, category=None) -> tuple[float | None, str | None]:
    """The paper's number for a cell and how sure we are of it (`confidence` column of results/paper)."""
    if paper is None or col not in paper.columns:
        return None, None
    pair = spec.get("paper_pair", spec["pair"])
    sel = paper[(paper["pair"] == pair) & (paper["data"] == data) & (paper["method"] == row["method"])]
    if "delta" in row:
        sel = sel[pd.to_numeric(sel["delta"], errors="coerce") == row["delta"]]
    if category is not None:
        sel = sel[sel["category"] == category]
    sel = sel.dropna(subset=[col])
    if not len(sel):
        return None, None
    confidence = sel["confidence"].iloc[0] if "confidence" in sel.columns else None
    return float(sel[col].iloc[0]), confidence


def _paper_cell(*args) -> dict:
    value, confidence = _paper_value(*args)
    return {"paper": value, "paper_confidence": confidence}


SPECBENCH_LABELS = {"speedup": "speedup (ratio of mean speeds)"}  # Spec-Bench's own speedup, not the task time


def _specbench_records(spec, data, row, run, ar, paper):
    if run is not None:
        table = specbench.speed_metrics(run.samples, ar.samples if ar is not None else None)
    else:  # no run yet: the paper's cells still show
        rows = paper[paper["method"] == row["method"]] if paper is not None and "category" in paper else []
        table = {c: {} for c in (rows["category"].unique() if len(rows) else [])}
    out = []
    for category, vals in table.items():
        for col in spec["columns"]:
            ours = 1.0 if (run is not None and run.is_baseline and col == "speedup") else vals.get(col)
            out.append(
                {
                    "data": category,
                    "label": row["label"],
                    "metric": col,
                    "ours": ours,
                    "stderr": None,
                    "ci": vals.get(f"{col}_ci"),
                    "metric_label": SPECBENCH_LABELS.get(col),
                    **_paper_cell(paper, spec, data, row, col, category),
                }
            )
    return out


def _fmt(x, metric):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return metrics.METRICS.get(metric).format(x) if metric in metrics.METRICS else f"{x:.3g}"


def _label(metric: str) -> str:
    return metrics.METRICS.get(metric).label if metric in metrics.METRICS else metric


UNVERIFIED_MARK = "†"
REJ_FOOTNOTE = (
    "Rej = r / r_SpS − 1 with r = Σ(drafted − accepted) / Σ emitted tokens, against the SpS run of the same "
    "setting. The paper does not publish its formula (the authors' code does not compute it); from the paper's "
    "own AL values this form gives −30/−35/−33 % (GSM8K) and −45/−46/−49 % (GPQA) against the printed "
    "−32/−36/−34 and −46/−46/−50."
)
PROTOCOL_NOTE = "Protocol (every setting that decides a number, ours against the authors'): docs/protocol.md."


def _footnotes(spec: dict, df: pd.DataFrame) -> list[str]:
    out = []
    if (df["paper_confidence"] == "unverified").any():
        out.append(f"{UNVERIFIED_MARK} paper number not traced to a readable copy of the paper (unverified)")
    if "rej" in spec.get("columns", []):
        out.append(REJ_FOOTNOTE)
    out.append(PROTOCOL_NOTE)
    return out


def wide(df: pd.DataFrame) -> pd.DataFrame:
    """Rows = method labels, columns = (data, metric) with 'ours (paper)'."""

    def cell(r):
        text = _fmt(r["ours"], r["metric"])
        if r["stderr"] is not None and not pd.isna(r["stderr"]) and r["ours"] is not None:
            text += f" ± {r['stderr']:.1f}"
        if isinstance(r.get("ci"), (list, tuple)) and r["ours"] is not None:
            low, high = (_fmt(v, r["metric"]).rstrip("×") for v in r["ci"])
            text += f" [{low}, {high}]"
        if r["paper"] is not None and not pd.isna(r["paper"]):
            mark = UNVERIFIED_MARK if r.get("paper_confidence") == "unverified" else ""
            text += f" ({_fmt(r['paper'], r['metric'])}{mark})"
        return text

    labels = df["metric"].map(_label)
    if "metric_label" in df:
        labels = df["metric_label"].fillna(labels)
    df = df.assign(cell=df.apply(cell, axis=1), column=df["data"] + " " + labels)
    order = list(dict.fromkeys(df["label"]))
    return df.pivot(index="label", columns="column", values="cell").reindex(order)[list(dict.fromkeys(df["column"]))]


def render_table(
    spec: dict, runs: list[Run], out_dir: Path | str = RESULTS / "tables", overrides: list[str] = ()
) -> tuple[str, Path]:
    df, notes = build_table(spec, runs, overrides)
    out = Path(out_dir)
    base = out / spec["name"]
    table = wide(df)
    md = f"## {spec.get('title', spec['name'])}\n\n"
    if spec.get("paper"):
        md += f"ours (paper) — paper numbers from `{spec['paper']}`\n\n"
    md += table.to_markdown() + "\n"
    notes = notes + _footnotes(spec, df)
    if notes:
        md += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    if df["ours"].isna().all():  # no stored run matched any cell: never replace a file with an empty table
        log.warning("no stored run matches %s: table printed, nothing written", spec["name"])
        return md, base.with_suffix(".md")
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(base.with_suffix(".csv"), index=False)
    write_text_atomic(base.with_suffix(".md"), md)
    write_text_atomic(base.with_suffix(".tex"), table.to_latex(escape=True))
    return md, base.with_suffix(".md")


# --- figures ------------------------------------------------------------------------------------------


def _runs_frame(runs: list[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        s, c = r.summary, r.config
        rows.append(
            {
                "pair": c["pair"]["name"],
                "data": r.data_label,
                "kind": c["data"].get("kind", "task"),
                "setting": r.setting(),
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


def figures(
    runs: list[Run], out_dir: Path | str = RESULTS / "figures", specs: list[dict] = (), overrides: list[str] = ()
) -> dict[str, Path]:
    """Figure 1 (score vs AL with the verifier's ±1σ band), Figure 2 (δ grid), Figure 3 (wall-time
    speedup), and Spec-Bench per-category speedup — one PNG + PDF each, for what the runs cover — and the
    figures of the given figure specs (Figure 4, the lossy trade-off; see figure_specs.py)."""
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

    for spec in specs:
        draw = DRAWINGS[spec["figure"]]
        extra = {"paper": load_paper_bounds(spec)} if spec["figure"] == "lossy_tradeoff" else {}
        notes = draw(spec, runs, overrides, save, plt, find_run, compose_cell, **extra)
        if notes:
            (out / f"{spec['name']}_notes.txt").write_text("\n".join(notes) + "\n")
            log.info("%s: %s", spec["name"], "; ".join(notes))

    task_runs = df[df["kind"] == "task"] if len(df) else df
    for (pair, data, setting), g in task_runs.groupby(["pair", "data", "setting"]) if len(task_runs) else []:
        # one figure per setting and m: runs that differ in anything else are never drawn together
        several = task_runs[(task_runs["pair"] == pair) & (task_runs["data"] == data)]["setting"].nunique() > 1
        ver = g[g["baseline"]]
        for m, gm in g[~g["baseline"]].groupby("m"):
            name = f"{data}_{pair}_m{m}" + (f"_{setting}" if several else "")
            title = f"{data} ({pair}, m={m})"
            _tradeoff_figure(plt, save, name, title, gm, ver)
            _delta_grid_figure(plt, save, name, title, gm)
            if len(ver):
                _speedup_figure(plt, save, name, title, gm, ver.iloc[0]["run"])

    spec_runs = df[df["kind"] == "specbench"] if len(df) else df
    for (pair, setting), g in spec_runs.groupby(["pair", "setting"]) if len(spec_runs) else []:
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
        ax.set(ylabel="speedup (ratio of mean speeds)", title=f"Spec-Bench speedup per category ({pair})")
        ax.legend(fontsize=7)
        several = spec_runs[spec_runs["pair"] == pair]["setting"].nunique() > 1
        save(fig, f"fig_specbench_{pair}" + (f"_{setting}" if several else ""))
    return made


def _delta_label(r) -> str:
    return f" δ={r['delta']:g}" if r["delta"] is not None and not pd.isna(r["delta"]) else ""


MARKERS = "os^Dvp<>h*"


def _method_styles(methods) -> dict[str, dict]:
    """One colour and marker per method (stable across a figure's panels)."""
    return {m: {"marker": MARKERS[i % len(MARKERS)], "color": f"C{i % 10}"} for i, m in enumerate(sorted(methods))}


def _tradeoff_figure(plt, save, name, title, g, ver):
    """Score (± one standard error) against AL, the verifier's ±1σ band behind. Hollow markers of
    decreasing size, so methods drawn on the same spot both stay visible; every δ is labelled."""
    fig, ax = plt.subplots(figsize=(5.6, 3.9))
    if len(ver) and ver["score"].notna().any():
        v = ver.iloc[0]
        sd = v["score_stderr"] or 0.0
        ax.axhspan(v["score"] - sd, v["score"] + sd, color="grey", alpha=0.25, label="verifier alone ±1σ")
        ax.axhline(v["score"], color="grey", lw=1)
    styles = _method_styles(g["method"].unique())
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
            if _delta_label(r):
                ax.annotate(
                    _delta_label(r).strip(),
                    (r["accepted_length"], r["score"]),
                    xytext=(7, 7 if j % 2 == 0 else -11),
                    textcoords="offset points",
                    fontsize=7,
                    color=styles[method]["color"],
                )
    ax.set(xlabel="accepted length AL (drafts accepted per verifier call)", ylabel="score (± 1 s.e.)")
    ax.set_title(f"Score vs AL — {title}", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    save(fig, f"fig1_tradeoff_{name}")


def _delta_grid_figure(plt, save, name, title, g):
    """AL and score of Cactus over δ, points joined in δ order."""
    cac = g[g["method"].isin(["cactus", "cactus_exact"])].dropna(subset=["delta"])
    if cac["delta"].nunique() < 2:
        return
    fig, ax1 = plt.subplots(figsize=(5, 3.6))
    ax2 = ax1.twinx()
    for i, (method, h) in enumerate(cac.groupby("method")):
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
    ax1.set(xlabel="δ", ylabel="AL", title=f"δ grid — {title}")
    ax2.set_ylabel("score")
    handles = [h for ax in (ax1, ax2) for h in ax.get_legend_handles_labels()[0]]
    ax1.legend(handles, [h.get_label() for h in handles], loc="best", fontsize=7)
    save(fig, f"fig2_delta_grid_{name}")


def _speedup_of(run: Run, ar_run: Run) -> tuple[metrics.Estimate | None, str]:
    """The paired speedup where the run has paired times, else the task-time ratio against the separate
    verifier-alone run; each with its bootstrap 95 % interval, and which one it is."""
    paired = metrics.paired_speedup(run.samples)
    if paired is not None:
        return paired, "paired"
    return metrics.speedup(run.samples, ar_run.samples), "task time"


def _speedup_figure(plt, save, name, title, g, ar_run):
    """Wall-time speedup over the verifier alone, with its 95 % interval (paired timing where stored)."""
    labels, values, lows, highs, kinds = [], [], [], [], set()
    for _, r in g.sort_values(["method", "delta"]).iterrows():
        est, kind = _speedup_of(r["run"], ar_run)
        if est is not None:
            labels.append(r["method"] + _delta_label(r))
            values.append(est.value)
            lows.append(est.value - est.low)
            highs.append(est.high - est.value)
            kinds.add(kind)
    if not values:
        return
    fig, ax = plt.subplots(figsize=(6.2, 0.5 * len(values) + 1.4))
    ax.barh(labels, values, xerr=[lows, highs], capsize=4, color="C0", alpha=0.8)
    for y, (v, up) in enumerate(zip(values, highs)):
        ax.annotate(f"{v:.2f}×", (v + up, y), xytext=(5, -3), textcoords="offset points", fontsize=7)
    ax.axvline(1.0, color="k", lw=1)
    ax.invert_yaxis()
    ax.set(xlabel=f"speedup over the verifier alone ({' / '.join(sorted(kinds))}; 95 % bootstrap interval)")
    ax.set_title(f"Speedup — {title}", fontsize=10)
    save(fig, f"fig3_speedup_{name}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["table", "figures"])
    ap.add_argument("spec", nargs="?", help="table spec (sweeps/*.yaml) for `table`")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides the runs were made with (e.g. sampling=greedy)")
    ap.add_argument("--results", default=str(RESULTS / "runs"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--pair", default=None, help="override the spec's pair (e.g. tiny)")
    args = ap.parse_args(argv)
    runs = load_runs(args.results)
    if args.what == "table":
        if not args.spec:
            ap.error("`table` needs a spec, e.g. sweeps/table1.yaml")
        spec = load_spec(args.spec, {"pair": args.pair})
        try:
            md, path = render_table(spec, runs, args.out or RESULTS / "tables", args.overrides)
        except AmbiguousRuns as e:
            raise SystemExit(f"error: {e}") from None
        print(md)
        print(f"written: {path.with_suffix('')}.{{csv,md,tex}}")
    else:
        specs = [
            load_spec(p, {"pair": args.pair})
            for p in sorted(Path("sweeps").glob("*.yaml"))
            if "figure" in (yaml.safe_load(p.read_text()) or {})
        ]
        made = figures(runs, args.out or RESULTS / "figures", specs, args.overrides)
        print("\n".join(str(p) for p in made.values()) or "no runs to plot")


if __name__ == "__main__":
    main()

"""Tables from stored runs, with the paper's numbers beside ours.

Each cell is the stored run whose identity equals that of the cell's composed config; Rej and speedup use
the SpS and verifier-alone runs of the same setting, and the table says when one is missing. What a cell
holds is the benchmark kind's (`benchmarks.base.Kind.cells`): a task run fills one group, a Spec-Bench run
one group per category.
"""

from __future__ import annotations

import logging
import math
import re
import textwrap
from pathlib import Path

import pandas as pd

from cactus_bench.adapters.benchmarks.base import KINDS
from cactus_bench.app.identity import RunIdentity
from cactus_bench.app.runs import Run, find, pool_seeds
from cactus_bench.core import intervals, metrics
from cactus_bench.core.methods import BASELINE
from cactus_bench.core.utils import write_text_atomic
from cactus_bench.tools.report import matched
from cactus_bench.tools.report.specs import compose_cell, spec_seeds

log = logging.getLogger("cactus_bench")

UNVERIFIED_MARK = "†"
REJ_FOOTNOTE = (
    "Rej = r / r_SpS − 1 with r = Σ(drafted − accepted) / Σ emitted tokens, against the SpS run of the same "
    "setting. The paper does not publish its formula (the authors' code does not compute it); from the paper's "
    "own AL values this form gives −30/−35/−33 % (GSM8K) and −45/−46/−49 % (GPQA) against the printed "
    "−32/−36/−34 and −46/−46/−50."
)
PROTOCOL_NOTE = "Protocol (every setting that decides a number, ours against the authors'): docs/protocol.md."
COLUMNS = ["data", "label", "metric", "metric_label", "ours", "stderr", "ci", "n", "mark", "paper", "paper_confidence"]
CAVEAT_MARK = "⚠"  # a timed figure whose conditions differ: read its note
NO_INTERVAL = (
    f"no interval below {intervals.MIN_ITEMS} items: none of them keeps its 95 % coverage there (docs/statistics.md)"
)


def fmt(x, metric: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    found = metrics.column_metric(metric)
    return found[0].format(x) if found is not None else f"{x:.3g}"


def label(metric: str) -> str:
    """A column's header: its metric's label, with the draft position of a positional metric's column."""
    found = metrics.column_metric(metric)
    if found is None:
        return metric
    m, position = found
    return m.label if position is None else f"{m.label}, {'k' if m.first_position == 0 else 'j'}={position}"


def build_table(spec: dict, runs: list[Run], overrides: list[str] = ()) -> tuple[pd.DataFrame, list[str]]:
    """Long-form table: one row per (data or group, method row, metric) with ours, the paper's and the
    difference. `overrides` are the Hydra overrides the runs were made with beyond the spec's."""
    paper = pd.read_csv(spec["paper"]) if spec.get("paper") and Path(spec["paper"]).exists() else None
    records, notes = [], []
    seeds = spec_seeds(spec)

    def pooled(row: dict, data: str) -> Run | None:  # the cell's runs at the spec's seeds, pooled by item
        found = [find(runs, RunIdentity.of(compose_cell({**spec, "seed": s}, row, data, overrides))) for s in seeds]
        return pool_seeds(found) if all(r is not None for r in found) else None

    if len(seeds) > 1:
        notes.append(
            f"each cell pools {len(seeds)} seeds ({', '.join(map(str, seeds))}): n items × {len(seeds)} "
            "seeds, every interval clustered by item"
        )
    for data in spec["data"]:
        anchor = compose_cell({**spec, "seed": seeds[0]}, {"method": "sps"}, data, overrides)  # the SpS run
        refs = {"sps": pooled({"method": "sps"}, data), "baseline": pooled({"method": BASELINE}, data)}
        kind = KINDS.get(anchor.data.kind)
        if refs["sps"] is None:
            notes.append(f"{data}: no SpS run (pair {spec['pair']}, m={spec['m']}): Rej not computed")
        if refs["baseline"] is None:
            notes.append(f"{data}: no verifier-alone ({BASELINE}) run: speedup not computed")
        found = {row["label"]: pooled(row, data) for row in spec["rows"]}
        present = [r for r in [*found.values(), *refs.values()] if r is not None]
        notes += [f"{data}: {r.note}" for r in present if r.note]
        if present:  # one item set for every cell of this dataset: the items all its runs share
            first = first_items(present, anchor.limit)
            shared = set.intersection(*({s["id"] for s in r.samples if s["index"] in first} for r in present))
            if anchor.limit and any(len(r.samples) > anchor.limit for r in present):
                notes.append(f"{data}: limit={anchor.limit}: every cell shows the first {anchor.limit} items only")
            if any(len(first & {s["index"] for s in r.samples}) != len(shared) for r in present):
                notes.append(f"{data}: every cell is computed on the {len(shared)} items all its runs share")
            found = {k: r.restricted(shared) if r is not None else None for k, r in found.items()}
            refs = {k: r.restricted(shared) if r is not None else None for k, r in refs.items()}
        for row in spec["rows"]:
            run = found[row["label"]]
            if run is None:
                notes.append(f"{data}: no run for {row['label']}")
                groups = {c: {} for c in _paper_groups(paper, row)} or {None: {}}
            else:
                groups = kind.cells(run, refs["sps"], refs["baseline"])
            for group, values in groups.items():
                for col in [*spec["columns"], "n"]:
                    ours, mark = values.get(col), ""
                    small = below_detectable(col, values)
                    if small:
                        notes.append(f"{row['label']}: {small}")
                    caveat = values.get(f"{col}_caveat")
                    if caveat is not None:
                        withheld, reason = caveat
                        notes.append(f"{row['label']}: {reason}")
                        ours, mark = (None, "") if withheld else (ours, CAVEAT_MARK)
                    if ours is not None and shows_interval(spec, col) and values.get(f"{col}_ci") is None:
                        few = values.get(f"{col}_n")
                        if few is not None and few < intervals.MIN_ITEMS:
                            notes.append(NO_INTERVAL)
                    records.append(
                        {
                            "data": data if group is None else group,
                            "label": row["label"],
                            "metric": col,
                            "metric_label": kind.labels.get(col),
                            "ours": ours,
                            "stderr": values.get("score_stderr") if col == "score" else None,
                            "ci": values.get(f"{col}_ci") if ours is not None and shows_interval(spec, col) else None,
                            "n": values.get(f"{col}_n") if col != "n" else None,
                            "mark": mark,
                            **_paper_cell(paper, spec, data, row, col, group),
                        }
                    )
    df = pd.DataFrame.from_records(records, columns=COLUMNS)
    df["diff"] = pd.to_numeric(df["ours"], errors="coerce") - pd.to_numeric(df["paper"], errors="coerce")
    return df, notes


def first_items(runs: list[Run], limit: int | None) -> set:
    """The keys of the items a run of `limit` decodes (every item when None): a benchmark's first `limit`
    items are its `limit` smallest keys (`Benchmark.key`), so the runs' stored keys name them."""
    keys = sorted({s["index"] for r in runs for s in r.samples})
    return set(keys[:limit] if limit else keys)


def below_detectable(col: str, values: dict) -> str | None:
    """For a paired score difference smaller than what its items can detect (80 % power, α = 0.05), the
    sentence a reader needs: not evidence of a difference, nor of equality."""
    m = metrics.METRICS.get(col) if col in metrics.METRICS else None
    if m is None or m.relative not in (metrics.score_delta, metrics.score_delta_sps):
        return None
    value, ci, n = values.get(col), values.get(f"{col}_ci"), values.get(f"{col}_n")
    if value is None or ci is None or not n or n < 3:
        return None
    sd = intervals.difference_sd(intervals.Estimate(value, ci[0], ci[1], n))
    size = intervals.detectable_difference(sd, n) if sd is not None else None
    if size is None or abs(value) >= size:
        return None
    return (
        f"{m.label} {m.format(value)} is below the {size:.1f} points {n} items can detect (paired, 80 % power, "
        "α = 0.05): no evidence of a difference, and no proof of none"
    )


def shows_interval(spec: dict, col: str) -> bool:
    """Comparisons and timings (relative and sampled metrics: Δ score, Rej, speedups) print their 95 %
    interval, and so does acceptance at each draft position; a rate (AL, acceptance, KL) prints its own where
    the spec lists it under `intervals`."""
    found = metrics.column_metric(col)
    if found is None:
        return False
    m, position = found
    return position is not None or m.relative is not None or m.sampled is not None or col in spec.get("intervals", ())


def _paper_groups(paper: pd.DataFrame | None, row: dict) -> list:
    """The paper's groups (e.g. Spec-Bench categories) for a row without a run: its cells still show."""
    if paper is None or "category" not in paper:
        return []
    return list(paper[paper["method"] == row["method"]]["category"].unique())


def _paper_cell(paper, spec, data, row, col, category=None) -> dict:
    """The paper's number for a cell and how sure we are of it (`confidence` column of results/paper)."""
    none = {"paper": None, "paper_confidence": None}
    if paper is None or col not in paper.columns:
        return none
    pair = spec.get("paper_pair", spec["pair"])
    if spec["pair"] != pair:  # the paper's numbers sit beside the paper's pair only
        return none
    sel = paper[(paper["pair"] == pair) & (paper["data"] == data) & (paper["method"] == row["method"])]
    if "delta" in row:
        sel = sel[pd.to_numeric(sel["delta"], errors="coerce") == row["delta"]]
    if category is not None:
        sel = sel[sel["category"] == category]
    sel = sel.dropna(subset=[col])
    if not len(sel):
        return none
    confidence = sel["confidence"].iloc[0] if "confidence" in sel.columns else None
    return {"paper": float(sel[col].iloc[0]), "paper_confidence": confidence}


def _footnotes(spec: dict, df: pd.DataFrame) -> list[str]:
    out = []
    if (df["paper_confidence"] == "unverified").any():
        out.append(f"{UNVERIFIED_MARK} paper number not traced to a readable copy of the paper (unverified)")
    if "rej" in spec.get("columns", []):
        out.append(REJ_FOOTNOTE)
    out.append(PROTOCOL_NOTE)
    return out


def cell_text(value, metric: str, stderr=None, ci=None, n=None, mark: str | None = None) -> str:
    """One figure as every reader prints it: value, ± its standard error, [its 95 % interval], n, ⚠."""
    text = fmt(value, metric)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return text
    if stderr is not None and not pd.isna(stderr):
        text += f" ± {stderr:.1f}"
    if isinstance(ci, (list, tuple)):
        low, high = (fmt(v, metric).rstrip("×") for v in ci)
        text += f" [{low}, {high}]"
    if n is not None and not pd.isna(n):
        text += f" n={int(n)}"
    return f"{text} {mark}" if mark else text


def wide(df: pd.DataFrame, compact: bool = False) -> pd.DataFrame:
    """Rows = method labels, columns = (data, metric) with 'ours (paper)'. `compact` (a terminal's): no n in
    the cells (a note gives it) and no dataset in the headers when there is one."""

    def cell(r):
        n = None if compact else r.get("n")
        text = cell_text(r["ours"], r["metric"], r["stderr"], r.get("ci"), n, r.get("mark"))
        if r["paper"] is not None and not pd.isna(r["paper"]):
            mark = UNVERIFIED_MARK if r.get("paper_confidence") == "unverified" else ""
            text += f" ({fmt(r['paper'], r['metric'])}{mark})"
        return text

    labels = df["metric_label"].fillna(df["metric"].map(label))
    one_dataset = compact and df["data"].nunique() == 1
    df = df.assign(cell=df.apply(cell, axis=1), column=labels if one_dataset else df["data"] + " " + labels)
    order = list(dict.fromkeys(df["label"]))
    return df.pivot(index="label", columns="column", values="cell").reindex(order)[list(dict.fromkeys(df["column"]))]


def _changes(spec: dict, overrides: list[str]) -> list[str]:
    """What this table's setting changes from its spec file: spec keys set on the command line (the pair, a
    limit, ...) and the overrides the runs were made with."""
    shown = {
        k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in spec.get("changed", {}).items()
    }
    # where runs are stored is not what they are: `paths.results=...` names no table
    return [f"{k}={v}" for k, v in shown.items()] + [o for o in overrides if not o.startswith("paths.")]


def table_name(spec: dict, overrides: list[str] = ()) -> str:
    """The files' name: the spec's, plus every setting that differs from the spec file, so a table of
    another setting (pair=tiny, sampling=greedy) never overwrites the spec's own."""
    changes = _changes(spec, overrides)
    if not changes:
        return spec["name"]
    slug = "_".join(re.sub(r"[^A-Za-z0-9.]+", "-", c) for c in changes)
    return f"{spec['name']}-{slug}"[:150]


def table_title(spec: dict, overrides: list[str] = ()) -> str:
    """The spec's title, and the setting these runs differ in (the spec's title names the paper's pair)."""
    title = spec.get("title", spec["name"])
    changes = _changes(spec, overrides)
    if not changes:
        return title
    note = (
        f"pair {spec['pair']}, not the paper's {spec['paper_pair']}"
        if spec["pair"] != spec.get("paper_pair", spec["pair"])
        else ""
    )
    rest = [c for c in changes if not c.startswith("pair=")]
    return f"{title} — run with {'; '.join(x for x in (note, ', '.join(rest)) if x)}"


def render_table(
    spec: dict, runs: list[Run], out_dir: Path | str, overrides: list[str] = (), shown: list[str] | None = None
) -> tuple[str, Path | None]:
    """The table as Markdown, and written as CSV, Markdown and LaTeX under `out_dir`: the path written, or
    None when no stored run matched (an empty table never replaces a file). `shown`: the columns the
    returned Markdown keeps (a terminal's few, its notes wrapped to TERMINAL_WIDTH); the files keep all."""
    df, notes = build_table(spec, runs, overrides)
    out = Path(out_dir)
    base = out / table_name(spec, overrides)
    table = wide(df)
    notes = list(dict.fromkeys(notes)) + _footnotes(spec, df)  # each note once
    md = markdown(spec, table, notes, overrides)
    printed = md if shown is None else terminal(spec, df[df["metric"].isin(shown)], notes, overrides)
    if df["ours"].isna().all():  # no stored run matched any cell: never replace a file with an empty table
        log.warning("no stored run matches %s: table printed, nothing written", spec["name"])
        return printed, None
    matched_md, matched_df = matched_markdown(spec, df) if spec.get("matched") else ("", None)
    if matched_md:
        printed += "\n" + matched_md
    try:
        out.mkdir(parents=True, exist_ok=True)
        df.to_csv(f"{base}.csv", index=False)  # not with_suffix: a name with a dot (δ=0.5) keeps its tail
        write_text_atomic(Path(f"{base}.md"), md + ("\n" + matched_md if matched_md else ""))
        write_text_atomic(Path(f"{base}.tex"), table.to_latex(escape=True))
        if matched_df is not None:
            matched_df.to_csv(f"{base}_matched.csv", index=False)
    except OSError as e:  # a read-only store is still read: the table is printed, its files not written
        log.warning("could not write %s.{csv,md,tex} (%s): the table is printed only (out=... elsewhere)", base, e)
        return printed, None
    return printed, Path(f"{base}.md")


TERMINAL_WIDTH = 120


def terminal(spec: dict, df: pd.DataFrame, notes: list[str], overrides) -> str:
    """The table as a terminal shows it: its few columns, each header cut before its parenthesis with a
    numbered key to its whole label, the items each column counts in a note, lines wrapped to TERMINAL_WIDTH."""
    table = wide(df, compact=True)
    keys, renamed = [], {}
    for column in table.columns:
        if " (" in column:
            keys.append(column)
            renamed[column] = f"{column.split(' (')[0]} [{len(keys)}]"
    counts = df.dropna(subset=["n"]).groupby("metric", sort=False)["n"].max()
    items = ", ".join(f"{label(m)} {int(n)}" for m, n in counts.items())
    said = [f"[{i}] {column}" for i, column in enumerate(keys, 1)] + ([f"items: {items}"] if items else [])
    return markdown(spec, table.rename(columns=renamed), [*said, *notes], overrides, wrap=True)


def markdown(spec: dict, table: pd.DataFrame, notes: list[str], overrides, wrap: bool = False) -> str:
    """The table's title, the table and its notes; `wrap`: title and notes wrapped to TERMINAL_WIDTH."""
    import textwrap

    def said(text: str, indent: str = "") -> str:
        return textwrap.fill(text, TERMINAL_WIDTH, subsequent_indent=indent, break_on_hyphens=False) if wrap else text

    md = said(f"## {table_title(spec, overrides)}") + "\n\n"
    if spec.get("paper") and spec["pair"] == spec.get("paper_pair", spec["pair"]):
        md += said(f"ours (paper) — paper numbers from `{spec['paper']}`") + "\n\n"
    md += table.to_markdown() + "\n"
    if notes:
        md += "\n" + "\n".join(said(f"- {n}", "  ") for n in notes) + "\n"
    return md


def matched_markdown(spec: dict, df: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """A spec's matched-acceptance reading (`matched.matched_table`) as Markdown, its cells printed as every
    table prints them, and its long table."""
    table, by_budget, notes = matched.matched_table(spec, df)
    if not len(table):
        return "", table
    shown = pd.DataFrame(
        {
            "data": table["data"],
            "rule": table["rule"],
            "at AL": table["AL"].map(lambda x: f"{x:g}"),
            **{label(m): [cell_text(v, m, ci=c) for v, c in zip(table[m], table[f"{m}_ci"])] for m in matched.READ},
        }
    )
    if shown["data"].nunique() == 1:
        shown = shown.drop(columns="data")
    md = f"### Matched acceptance: every rule read at the same AL\n\n{shown.to_markdown(index=False)}\n"
    if by_budget is not None:
        b = spec["matched"]["score_budget"]
        readable = by_budget.assign(**{k: by_budget[k].map(lambda x: "–" if pd.isna(x) else f"{x:.2f}")
                                       for k in ("AL", "conservative", "hopeful")})  # fmt: skip
        if readable["data"].nunique() == 1:
            readable = readable.drop(columns="data")
        md += (
            f"\n### The AL each rule reaches within a Δ score of −{b:g} points\n\n"
            f"{readable.rename(columns={'AL': f'AL at Δ ≥ −{b:g}'}).to_markdown(index=False)}\n"
        )
    said = [
        "each rule is a curve through its grid, starting at SpS (every relaxed rule is SpS at its knob's end); "
        "read linearly in AL between the two grid points around each AL; intervals: the points' paired 95 % "
        "intervals read the same way (never narrower than the interpolated difference's own)",
        *notes,
    ]
    if by_budget is not None:
        said.append("conservative / hopeful: where the Δ score's interval's low / high end crosses the budget")
    wrap = textwrap.TextWrapper(TERMINAL_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    md += "\n" + "\n".join(wrap.fill(f"- {n}") for n in said) + "\n"
    return md, table

"""Every reader of a store shows what its samples hold (issue 50): the table of a limit shows that limit's items,
`runs list` and `runs show` read runs through the table's check and print its figures with their intervals
and caveats, a spec refuses a dataset of another kind, the planner reads the store a run writes, and bad
settings are one paragraph."""

import re

import pandas as pd
import pytest

from cactus_bench.app.runs import load_runs
from cactus_bench.app.store import run_dir
from cactus_bench.tools import runs as runs_tool
from cactus_bench.tools.report import build_table, load_spec, render_table, tables
from cactus_bench.tools.report.specs import SpecError
from cactus_bench.tools.report.tables import cell_text, label

from ..helpers.cli import run_main
from ..helpers.configs import cfg_of, pair_overrides
from ..helpers.runs import ROOT, TINY, demo_spec, run_cell


@pytest.fixture(scope="module")
def store(small_pair_dir, tmp_path_factory):
    """One store: the verifier alone, SpS and Cactus on 12 items (enough for intervals), each one timed."""
    results = tmp_path_factory.mktemp("readers") / "runs"
    for method, *extra in (("ar",), ("sps",), ("cactus", "delta=0.05")):
        run_cell(
            method, *extra, "paired_timing=true", "batch_size=1", results=results, pair_dir=small_pair_dir, limit=12
        )
    return results


def cell(df, label, metric):
    return df[(df["label"] == label) & (df["metric"] == metric)].iloc[0]


def test_a_table_of_a_limit_shows_that_limits_items_only(store, small_pair_dir):
    """Runs of 12 items, then a table of `limit=4`: it was titled limit=4 and showed n=12. Now each cell is the
    first 4 items (the 4 smallest keys), and a note says so."""
    df, notes = build_table(demo_spec(limit=4), load_runs(store), pair_overrides(small_pair_dir))
    sps = next(r for r in load_runs(store) if r.identity.method == "sps")
    first = sorted(sps.samples, key=lambda s: s["index"])[:4]
    assert cell(df, "SpS", "n")["ours"] == 4
    assert cell(df, "SpS", "score")["ours"] == pytest.approx(sum(s["score"] for s in first) / 4)
    assert any("limit=4: every cell shows the first 4 items only" in n for n in notes)
    whole, _ = build_table(demo_spec(limit=12), load_runs(store), pair_overrides(small_pair_dir))
    assert cell(whole, "SpS", "n")["ours"] == 12


def test_runs_list_and_show_read_a_run_through_the_tables_check(small_pair_dir, tmp_path):
    """After the documented recovery from a damaged line (delete it), `runs list` showed the old summary's
    score and AL beside n = 7. It now shows what the samples hold, as the table does; its method column names
    the method as tables do, and the verifier alone has no m."""
    results = tmp_path / "runs"
    for method in ("ar", "sps"):
        run_cell(method, results=results, pair_dir=small_pair_dir, limit=8)
    folder = run_dir(cfg_of(*TINY, "method=sps", results=results, pair_dir=small_pair_dir))
    lines = (folder / "samples.jsonl").read_text().splitlines()
    (folder / "samples.jsonl").write_text("\n".join(lines[1:]) + "\n")  # the first line deleted
    run = runs_tool.load(folder)
    listed = runs_tool.listing(results, None, None, None)
    row = next(line for line in listed.splitlines() if "| SpS |" in line)
    assert "| 7 |" in row
    assert f"| {run.summary['score']:.2f} | {run.summary['accepted_length']:.2f} |" in row
    verifier = next(line for line in listed.splitlines() if "| Verifier |" in line)
    assert "| Verifier |  | 0 | 8 |" in verifier  # no m for a run that drafts nothing
    table, _ = build_table(
        {**demo_spec(limit=8), "columns": ["score", "accepted_length"]},
        load_runs(results),
        pair_overrides(small_pair_dir),
    )
    assert cell(table, "SpS", "accepted_length")["ours"] == pytest.approx(run.summary["accepted_length"])
    assert "summary.json counts 8 items but its samples hold 7" in runs_tool.show(run, None, results)


def test_every_reader_shows_the_same_figures_of_one_store(store, small_pair_dir):
    """The table (its Markdown, CSV and LaTeX), the run's own summary, `runs show`, `runs list` and `runs
    compare` give each figure of a run with the same value, interval, n and caveat: `runs show` dropped the
    speedup's interval and ⚠."""
    md, path = render_table(demo_spec(limit=12), load_runs(store), store.parent / "t", pair_overrides(small_pair_dir))
    df, notes = build_table(demo_spec(limit=12), load_runs(store), pair_overrides(small_pair_dir))
    cactus = next(r for r in load_runs(store) if r.identity.method == "cactus")
    shown = runs_tool.show(runs_tool.load(cactus.folder), None, store)
    table_row = next(line for line in md.splitlines() if line.startswith("| Cactus δ=0.05"))
    al = cell(df, "Cactus δ=0.05", "accepted_length")["ours"]  # a rate: the table gives its interval on request
    assert f"| AL (Σ rounds) | {al:.2f} [" in shown and f"| {al:.2f} " in table_row
    for metric in ("score_delta", "rej", "paired_speedup", "item_paired_speedup", "predicted_speedup", "cost_ratio"):
        c = cell(df, "Cactus δ=0.05", metric)
        text = re.escape(cell_text(c["ours"], metric, None, c["ci"], c["n"], c["mark"] or None))
        assert re.search(rf"\| {re.escape(label(metric))} \| {text} \|", shown), (metric, shown)
        assert re.search(text, table_row), (metric, table_row)
    caveats = [n.split(": ", 1)[1] for n in notes if n.startswith("Cactus δ=0.05: ") and "timed" in n]
    assert all(c in shown for c in caveats)
    listed = runs_tool.listing(store, None, None, "cactus")
    assert f"| {cell(df, 'Cactus δ=0.05', 'score')['ours']:.2f} | {cactus.summary['accepted_length']:.2f} |" in listed
    written = pd.read_csv(path.with_suffix(".csv"))
    latex = path.with_suffix(".tex").read_text()
    for metric in ("score", "score_delta", "accepted_length", "rej", "paired_speedup", "predicted_speedup"):
        ours = cell(df, "Cactus δ=0.05", metric)["ours"]
        assert cell(written, "Cactus δ=0.05", metric)["ours"] == pytest.approx(ours), metric
        assert cactus.summary[metric] == pytest.approx(ours), metric  # what the run printed when it ended
        assert tables.fmt(ours, metric).replace("%", r"\%") in latex, metric  # LaTeX escapes %
    ar = next(r for r in load_runs(store) if r.identity.method == "ar")
    delta = cell(df, "Cactus δ=0.05", "score_delta")
    low, high = delta["ci"]
    compared = runs_tool.compare(ar, cactus)
    assert f"Δ score, paired by item: {delta['ours']:+.2f} [{low:+.2f}, {high:+.2f}] (n = 12)" in compared
    sps = next(r for r in load_runs(store) if r.identity.method == "sps")
    rej = tables.fmt(cell(df, "Cactus δ=0.05", "rej")["ours"], "rej")
    assert rej.endswith("%") and f"Rej, this run against the first as SpS: {rej} [" in runs_tool.compare(sps, cactus)


def test_a_spec_refuses_a_dataset_of_another_kind_in_one_paragraph():
    """`report table sweeps/table2.yaml data=arith` filed a missing row under a phantom group and printed nan;
    with data=gsm8k,arith it crashed in `wide` (duplicate index)."""
    from cactus_bench.tools.report.__main__ import main

    for data in ("arith", "gsm8k,arith"):
        out = run_main(main, "table", "sweeps/table2.yaml", "pair=tiny", f"data={data}")
        said = " ".join(out.stderr.split())
        assert out.returncode == 2 and "Traceback" not in said
        assert "is a task dataset, and table2.yaml is a table of specbench runs" in said and "demo.yaml" in said
    with pytest.raises(SpecError, match="is a specbench dataset"):
        load_spec(ROOT / "sweeps" / "demo.yaml", {"data": ["specbench"]})


@pytest.mark.parametrize(
    "tool,args",
    [
        ("report", ("table", "sweeps/demo.yaml", "limit=abc")),
        ("plan", ("sweeps/demo.yaml", "limit=abc")),
        ("report", ("table", "sweeps/demo.yaml", "max_gen_toks=1.5")),
    ],
)
def test_a_count_that_is_not_a_whole_number_is_one_paragraph(tool, args):
    from cactus_bench.tools.plan import main as plan_main
    from cactus_bench.tools.report.__main__ import main as report_main

    out = run_main(report_main if tool == "report" else plan_main, *args)
    said = " ".join(out.stderr.split())
    key = args[-1].split("=")[0]
    assert out.returncode == 2 and "Traceback" not in said and "ValueError" not in said
    assert f"{key}=" in said and "is not a whole number" in said


def test_the_plan_reads_the_store_a_run_writes(store, small_pair_dir):
    """`plan` read stored runs only through CACTUS_BENCH_RESULTS (`results=` was a Hydra traceback): it takes
    `results=` as `report` and `runs` do, and otherwise reads `paths.runs` as the runs' overrides set it."""
    from cactus_bench.tools.plan import main

    args = ("sweeps/demo.yaml", "limit=12", "m=2", "max_gen_toks=8", *pair_overrides(small_pair_dir))
    for where in (f"results={store}", f"paths.runs={store}"):
        out = run_main(main, *args, where)
        assert out.returncode == 0, out.stderr
        assert "| stored" in out.stdout.split("| data")[1], out.stdout
    empty = run_main(main, *args, f"results={store.parent / 'none'}")
    assert empty.returncode == 0 and "| stored" not in empty.stdout.split("| data")[1]


def test_a_tables_file_name_and_title_show_a_list_as_the_command_line_wrote_it(store, small_pair_dir):
    """`data=arith` named the files `demo-data-arith-…` from `data=['arith']`; `paths.results=` (where runs are
    kept, not what they are) named them too, and cut the name at its dot."""
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"data": ["arith"], "limit": 12, "m": 2, "max_gen_toks": 8})
    spec["changed"]["data"] = ["arith", "gsm8k"]
    md, path = render_table(
        spec, load_runs(store), store.parent / "named", [*pair_overrides(small_pair_dir), "paths.results=/x/y"]
    )
    assert "data=arith,gsm8k" in md and "['arith'" not in md and "paths.results" not in md
    assert path is not None and path.name.startswith("demo-") and "data-arith-gsm8k" in path.name
    assert path.with_suffix(".csv").exists() and path.with_suffix(".tex").exists()


def test_the_speedup_figure_names_the_items_it_timed(small_pair_dir, tmp_path, monkeypatch):
    """fig3 was titled with the run's n while its bars were the timing sample's, and its axis said
    "95 % interval" with none drawn. Now its title names both, and a sample too small for an interval says so."""
    from cactus_bench.tools.report.figures import figures
    from cactus_bench.tools.report.figures.common import Sink

    results = tmp_path / "runs"
    for method in ("ar", "sps"):
        run_cell(method, "batch_size=4", "timing_sample=6", results=results, pair_dir=small_pair_dir, limit=12)
    drawn = {}

    def keep(self, fig, name):
        ax = fig.axes[0]
        drawn[name] = (ax.get_title(), ax.get_ylabel())

    monkeypatch.setattr(Sink, "save", keep)
    figures(load_runs(results), tmp_path / "figures", [], pair_overrides(small_pair_dir))
    title, ylabel = next(v for k, v in drawn.items() if k.startswith("fig3_speedup"))
    assert "n=12" in title and "speedup timed on n=6" in title
    assert "too few items for an interval" in ylabel and "95 %" not in ylabel


def test_an_sps_runs_own_summary_gives_its_rej_as_0(small_pair_dir, tmp_path):
    """Rej is measured against the setting's SpS run: an SpS run's own summary (what the run prints) left it
    out ("–", no note) since its reference, itself, was not stored yet; the table printed +0 %."""
    summary = run_cell("sps", results=tmp_path / "runs", pair_dir=small_pair_dir, limit=4)
    assert summary["rej"] == 0
    ar = run_cell("ar", results=tmp_path / "runs", pair_dir=small_pair_dir, limit=4)
    assert "rej" not in ar  # the verifier alone drafts nothing: no Rej at all


def test_runs_show_gives_the_reason_a_figure_is_withheld(small_pair_dir, tmp_path):
    """A batched run's speedup is withheld (rows decoded together have no per-item time): the table names the
    reason; `runs show` left both the figure and its reason out."""
    results = tmp_path / "runs"
    for method in ("ar", "sps"):
        run_cell(method, "batch_size=4", results=results, pair_dir=small_pair_dir, limit=4)
    spec = {**demo_spec(limit=4), "columns": ["score", "speedup"]}
    df, notes = build_table(spec, load_runs(results), pair_overrides(small_pair_dir))
    assert pd.isna(cell(df, "SpS", "speedup")["ours"])
    reasons = [n.split(": ", 1)[1] for n in notes if n.startswith("SpS: ") and "speedup" in n]
    assert reasons
    sps = next(r for r in load_runs(results) if r.identity.method == "sps")
    shown = runs_tool.show(runs_tool.load(sps.folder), None, results)
    assert all(reason in shown for reason in reasons), (reasons, shown)

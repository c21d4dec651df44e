"""Tables and figures from a fixture store of the demo's methods on the small pair."""

import json
import re
from pathlib import Path

import pytest

from cactus_bench.app import method_configs  # noqa: F401  (the method group Hydra composes)
from cactus_bench.app import run as run_mod
from cactus_bench.app.runs import load_runs
from cactus_bench.core import metrics
from cactus_bench.tools.report import figures, load_spec, render_table
from cactus_bench.tools.report.figures.common import FAMILIES, Family

from ..helpers.configs import cfg_of, pair_overrides

ROOT = Path(__file__).resolve().parents[2]


# --- reports from a fixture store ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixture_store(small_pair_dir, tmp_path_factory):
    """A small store with the demo's methods, on the small pair."""
    results = tmp_path_factory.mktemp("store") / "runs"
    spec = load_spec(ROOT / "sweeps" / "demo.yaml")
    for row in spec["rows"]:
        overrides = [
            "pair=tiny",
            "data=arith",
            f"method={row['method']}",
            "m=3",
            "limit=10",  # intervals need intervals.MIN_ITEMS items
            "max_gen_toks=10",
            "paired_timing=true",
            "progress=false",
        ] + ([f"delta={row['delta']}"] if "delta" in row else [])
        run_mod.run(cfg_of(*overrides, results=results, pair_dir=small_pair_dir))
    return results


def test_table_from_a_fixture_store(fixture_store, small_pair_dir, tmp_path):
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 3, "max_gen_toks": 10})
    md, path = render_table(spec, load_runs(fixture_store), tmp_path, pair_overrides(small_pair_dir))
    for row in spec["rows"]:
        assert row["label"] in md
    assert {p.suffix for p in tmp_path.iterdir()} == {".csv", ".md", ".tex"}
    assert "+0%" in md  # SpS's Rej against itself
    sps_row = next(line for line in md.splitlines() if line.startswith("| SpS "))
    assert re.search(r"\d\.\d\d× \[\d\.\d\d, \d\.\d\d\]", sps_row)  # paired speedup [95 % interval]
    assert "speedup (paired, ratio of totals)" in md and "speedup (paired, mean of items)" in md
    assert re.search(r"^\| SpS .*\|\s+10\s+\|$", md, re.M)  # every row: its n items
    assert "no run for" not in md and "no SpS run" not in md


def test_a_spec_asks_for_acceptance_per_position_as_a_column_set(fixture_store, small_pair_dir, tmp_path):
    """`columns: [acceptance_at, accepted_at_least]` at m = 3: a column per draft position, each with its
    interval over items; the verifier alone drafts nothing, so its cells are empty."""
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 3, "max_gen_toks": 10})
    spec["columns"] = metrics.expand_columns(["accepted_length", "acceptance_at", "accepted_at_least"], 3)
    md, _ = render_table(spec, load_runs(fixture_store), tmp_path, pair_overrides(small_pair_dir))
    for j in (1, 2, 3):
        assert f"arith acc. at j (given 1..j−1), j={j}" in md and f"arith P(≥ j accepted), j={j}" in md
    sps = next(line for line in md.splitlines() if line.startswith("| SpS "))
    assert len(re.findall(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", sps)) >= 4  # positions with intervals
    verifier = next(line for line in md.splitlines() if line.startswith("| Verifier "))
    assert verifier.count("–") >= 7


def test_tables_and_figures_match_runs_on_their_full_identity(fixture_store, small_pair_dir, tmp_path):
    """A greedy run beside the sampled ones: each table shows its own setting's numbers, figures never mix
    the two, and a copied run folder (two runs, one identity) is refused by name."""
    import shutil

    from cactus_bench.app.runs import AmbiguousRuns, find_run

    store = tmp_path / "runs"
    shutil.copytree(fixture_store, store)
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 3, "max_gen_toks": 10})
    row = next(r for r in spec["rows"] if r["method"] == "cactus")
    greedy = ["pair=tiny", "data=arith", "method=cactus", f"delta={row['delta']}", "m=3", "limit=2", "max_gen_toks=10"]
    run_mod.run(cfg_of(*greedy, "sampling=greedy", "progress=false", results=store, pair_dir=small_pair_dir))
    runs = load_runs(store)
    from cactus_bench.tools.report import compose_cell

    sampled = find_run(runs, compose_cell(spec, row, "arith", pair_overrides(small_pair_dir)))
    greedy_run = find_run(runs, compose_cell(spec, row, "arith", [*pair_overrides(small_pair_dir), "sampling=greedy"]))
    assert sampled.config["sampling"]["temperature"] == 0.6 and greedy_run.config["sampling"]["temperature"] == 0
    assert greedy_run.summary["target_kl"] == 0.0 and sampled is not greedy_run
    made = figures(runs, tmp_path / "figs")
    fig2 = [n for n in made if n.startswith("fig2_delta_grid_arith")]
    assert len(fig2) == 1  # the sampled setting has a δ grid; the greedy one a single δ, so no grid
    assert len([n for n in made if n.startswith("fig1_tradeoff_arith")]) == 2  # one per setting
    shutil.copytree(sampled.folder, sampled.folder.parent / "copy_of_run")
    with pytest.raises(AmbiguousRuns, match="copy_of_run"):
        find_run(load_runs(store), compose_cell(spec, row, "arith", pair_overrides(small_pair_dir)))


def test_table_puts_the_paper_beside_ours_and_names_missing_references(fixture_store, small_pair_dir, tmp_path):
    spec = load_spec(ROOT / "sweeps" / "table1.yaml", {"pair": "tiny", "data": ["arith"]})
    md, _ = render_table(spec, load_runs(fixture_store), tmp_path, pair_overrides(small_pair_dir))
    assert "ours (paper)" not in md and "| SpS " in md  # another pair's runs: no paper numbers beside them
    spec = load_spec(ROOT / "sweeps" / "table1.yaml")
    md, _ = render_table(spec, load_runs(fixture_store), tmp_path)
    assert "no SpS run" in md and "(91.71)" in md  # no runs for the paper's pair: the paper column stays


def test_figures_from_a_fixture_store(fixture_store, tmp_path):
    made = figures(load_runs(fixture_store), tmp_path)
    names = set(made)
    assert any(n.startswith("fig1_tradeoff_arith") for n in names)
    assert any(n.startswith("fig2_delta_grid_arith") for n in names)
    assert any(n.startswith("fig3_speedup_arith") for n in names)
    assert any(n.startswith("positions_arith") for n in names)  # acceptance against draft position
    for png in made.values():
        assert png.stat().st_size > 1000 and png.with_suffix(".pdf").exists()


def test_notebook_regenerates_the_figures_headless(fixture_store, monkeypatch, tmp_path):
    """Run as `jupyter execute` runs it (in notebooks/): before, it found no sweeps there, drew nothing, exited
    0 and created notebooks/results/. Now paths resolve from the project root, and no runs is an error."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbclient.exceptions import CellExecutionError

    def execute():
        nb = nbformat.read(ROOT / "notebooks" / "figures.ipynb", as_version=4)
        where = {"metadata": {"path": str(ROOT / "notebooks")}}
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources=where).execute()

    monkeypatch.setenv("CACTUS_BENCH_RESULTS", str(fixture_store.parent))  # the notebook reads conf/paths
    execute()
    assert list((fixture_store.parent / "figures").glob("fig1_tradeoff_*.png"))
    assert not (ROOT / "notebooks" / "results").exists()
    monkeypatch.setenv("CACTUS_BENCH_RESULTS", str(tmp_path / "empty"))
    with pytest.raises(CellExecutionError, match="no stored runs under"):
        execute()


def test_figure_1_draws_each_methods_paired_difference_from_the_verifier(fixture_store, tmp_path, monkeypatch):
    """Beside score vs AL, Figure 1 plots each method's Δ score vs the verifier alone with its paired 95 %
    interval: the values `intervals.paired_difference` gives for the same runs (per-item scores set apart per
    method here: the small pair scores 0 on every item)."""
    import random

    from cactus_bench.app.runs import Run
    from cactus_bench.core import intervals
    from cactus_bench.tools.report import figures
    from cactus_bench.tools.report.figures import common

    drawn = {}
    real = common.Sink.save

    def save(self, fig, name):
        if name.startswith("fig1_tradeoff"):
            drawn["points"] = [
                (float(c.lines[0].get_ydata()[0]), *(float(v) for v in c.lines[2][0].get_segments()[0][:, 1]))
                for c in fig.axes[1].containers
            ]
            drawn["titles"] = [ax.get_title() for ax in fig.axes]
        real(self, fig, name)

    monkeypatch.setattr(common.Sink, "save", save)
    rng = random.Random(0)
    runs = [
        Run(r.folder, r.config, r.summary, [{**x, "score": 100.0 * (rng.random() < 0.6)} for x in r.samples])
        for r in load_runs(fixture_store)
    ]
    figures(runs, tmp_path)
    assert len(drawn["points"]) == 4 and "n = 10 items" in drawn["titles"][1]
    ver = next(r for r in runs if r.is_baseline)
    want = sorted(
        (e.value, e.low, e.high)
        for e in (intervals.paired_difference(r.samples, ver.samples) for r in runs if not r.is_baseline)
    )
    assert [pytest.approx(p) for p in sorted(drawn["points"])] == want
    assert len({w[0] for w in want}) > 1  # the methods' differences are not all alike


def test_a_table_of_another_setting_is_named_and_titled_after_it(fixture_store, small_pair_dir, tmp_path):
    """`report table` wrote results/tables/<spec>.* whatever the overrides (an override run overwrote the
    demo table) under the spec's title, with the paper's numbers beside another pair's."""
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 3, "max_gen_toks": 10})
    md, path = render_table(spec, load_runs(fixture_store), tmp_path, pair_overrides(small_pair_dir))
    assert path.name.startswith("demo-m-3_max-gen-toks-10_pair.drafter-") and path.name != "demo.md"
    assert md.splitlines()[0].startswith("## Demo: embedded tiny pair") and "— run with m=3, max_gen_toks=10" in md
    plain = load_spec(ROOT / "sweeps" / "demo.yaml")
    from cactus_bench.tools.report.tables import table_name, table_title

    assert table_name(plain) == "demo" and table_title(plain) == plain["title"]  # the spec's own setting
    table1 = load_spec(ROOT / "sweeps" / "table1.yaml", {"pair": "tiny"})
    md, _ = render_table(table1, [], tmp_path)
    assert "(91.71)" not in md and "pair tiny, not the paper's qwen3_0.6b_14b" in md  # no paper beside tiny
    assert "(91.71)" in render_table(load_spec(ROOT / "sweeps" / "table1.yaml"), [], tmp_path)[0]  # control


@pytest.mark.slow  # draws every figure of two settings: ~30 s
def test_figures_of_several_settings_say_how_they_differ_and_stale_ones_go(fixture_store, tmp_path, monkeypatch):
    """Figures of two settings shared a title and differed by a hash suffix, without n, and nothing said which
    hash was which setting: titles say how the settings differ and index.md maps every file to its title. A
    figure whose runs are gone is removed on the next drawing; figures another command drew with other
    overrides, and files not ours, stay (`make figures` deleted them)."""
    import shutil

    import yaml

    store = tmp_path / "runs"
    shutil.copytree(fixture_store, store)
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "mine.txt").write_text("not ours")
    copies = []
    for run in load_runs(store):  # every run again as a second setting: greedy
        config = yaml.safe_load((run.folder / "config.yaml").read_text())
        config["sampling"].update(temperature=0.0, top_k=0, top_p=1.0)
        copies.append(run.folder.parent / (run.folder.name + "-greedy"))
        shutil.copytree(run.folder, copies[-1])
        (copies[-1] / "config.yaml").write_text(yaml.safe_dump(config))
    titles = []

    def titled(draw):
        return lambda sink, name, title, g, v: (titles.append(title), draw(sink, name, title, g, v))

    for family in FAMILIES.names():
        if FAMILIES.get(family).source == "store":
            monkeypatch.setitem(FAMILIES._items, family, Family(titled(FAMILIES.get(family).draw), "store"))
    made = figures(load_runs(store), figs)
    assert {t.split("; n=")[0] for t in titles} == {
        "arith (small, m=3, temperature=0.0, top_k=0, top_p=1.0",
        "arith (small, m=3, temperature=0.6, top_k=20, top_p=0.95",
    }
    assert all(re.search(r"; n=\d+\)$", t) for t in titles), titles
    index = (figs / "index.md").read_text()
    for name in made:  # a hashed name is found with the setting it draws
        assert re.search(rf"\| {re.escape(name)}\.png \| arith \(small, m=3, temperature=", index), name
    other = json.loads((figs / "index.json").read_text())
    other["figure4_arith"] = {"title": "Figure 4", "scope": ["pair=tiny"], "files": ["figure4_arith.png"]}
    (figs / "index.json").write_text(json.dumps(other))
    (figs / "figure4_arith.png").write_bytes(b"drawn by report figures pair=tiny")
    for copy in copies:  # the greedy runs are gone: their figures go on the next drawing
        shutil.rmtree(copy)
    again = figures(load_runs(store), figs)
    gone = set(made) - set(again)
    assert gone and not any((figs / f"{name}.png").exists() for name in gone)
    assert all((figs / f"{name}.png").exists() for name in again)
    assert (figs / "mine.txt").exists() and (figs / "figure4_arith.png").exists()  # not ours; another scope's


def test_a_terminal_shows_the_specs_few_columns_within_120_characters(fixture_store, small_pair_dir, tmp_path):
    """`shown:` (the demo's: README's columns) is what a sweep prints: 120 characters at most a line, each
    long header cut before its parenthesis with a numbered key to its whole label, the items each column
    counts in a note; the written table keeps every column with its n."""
    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"m": 3, "max_gen_toks": 10})
    printed, path = render_table(
        spec, load_runs(fixture_store), tmp_path, pair_overrides(small_pair_dir), spec["shown"]
    )
    assert spec["shown"] == ["score", "score_delta", "accepted_length", "rej", "paired_speedup"]
    assert max(len(line) for line in printed.splitlines()) <= 120, printed
    header = next(line for line in printed.splitlines() if line.startswith("| label"))
    assert "| AL [1]" in header and "speedup [2]" in header and "arith" not in header and "τ" not in header
    assert "- [2] speedup (paired, ratio of totals)" in printed and "- items: Δ score vs verifier 10" in printed
    assert " n=" not in printed
    written = path.read_text()
    assert "arith τ" in written and " n=10" in written and "speedup vs SpS (paired)" in written

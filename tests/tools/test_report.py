"""Tables from stored runs (report/): written only when they hold something, seeds pooled by item, damaged
files named in one paragraph, another store's tables beside it."""

import re
from pathlib import Path

import pytest

from cactus_bench.app import run as run_mod
from cactus_bench.app.runs import load_runs
from cactus_bench.app.store import run_dir
from cactus_bench.tools.report import build_table, load_spec, render_table

from ..helpers.cli import one_paragraph, run_main
from ..helpers.configs import cfg_of, pair_overrides
from ..helpers.runs import TINY, demo_spec, run_cell

ROOT = Path(__file__).resolve().parents[2]


def test_an_empty_table_never_replaces_a_file(tmp_path):
    (tmp_path / "table1.md").write_text("committed table")
    md, _ = render_table(load_spec(ROOT / "sweeps" / "table1.yaml"), [], tmp_path)
    assert "table1" in md.lower() and (tmp_path / "table1.md").read_text() == "committed table"
    assert not (tmp_path / "table1.csv").exists()


def test_report_says_written_only_when_it_wrote(tmp_path):
    from cactus_bench.tools.report.__main__ import main

    out = run_main(main, "table", "sweeps/table1.yaml", f"results={tmp_path}", f"out={tmp_path / 't'}")
    assert out.returncode == 0 and "written:" not in out.stdout and not (tmp_path / "t").exists()


def test_several_seeds_are_runs_of_their_own_and_a_table_pools_them_by_item(small_pair_dir, tmp_path):
    """A spec with `seeds: [0, 1]` sweeps every cell once per seed (each its own run); its table pools a
    cell's seeds item by item: n is the items, and an interval is clustered by item (an item's counters
    summed over its seeds are one unit), not computed as if the 2n decodes were independent."""
    from cactus_bench.core.metrics import ratio_interval
    from cactus_bench.tools.sweep import spec_cells

    spec = {**demo_spec(limit=10), "seeds": [0, 1], "columns": ["score", "accepted_length"]}
    assert len(spec_cells(spec)) == 2 * len(spec["rows"])
    for seed in (0, 1):
        for method in ("ar", "sps"):
            run_cell(method, f"seed={seed}", results=tmp_path, pair_dir=small_pair_dir, limit=10)
    spec["rows"] = [r for r in spec["rows"] if r["method"] in ("ar", "sps")]
    spec["intervals"] = ["accepted_length"]
    df, notes = build_table(spec, load_runs(tmp_path), pair_overrides(small_pair_dir))
    assert any("each cell pools 2 seeds (0, 1)" in n for n in notes)
    decodes = [s for r in load_runs(tmp_path) if r.identity.method == "sps" for s in r.samples]
    items = {}
    for s in decodes:
        a, b = items.get(s["id"], (0, 0))
        items[s["id"]] = (a + s["stats"]["accepted"], b + s["stats"]["verifier_calls"])
    clustered = ratio_interval(list(items.values()))
    independent = ratio_interval([(s["stats"]["accepted"], s["stats"]["verifier_calls"]) for s in decodes])
    cell = df[(df["label"] == "SpS") & (df["metric"] == "accepted_length")].iloc[0]
    assert cell["ours"] == pytest.approx(clustered.value)
    assert list(cell["ci"]) == pytest.approx([clustered.low, clustered.high])
    assert list(cell["ci"]) != pytest.approx([independent.low, independent.high])  # the 2n decodes as units
    assert df[(df["label"] == "SpS") & (df["metric"] == "n")].iloc[0]["ours"] == 10


def test_damaged_files_are_one_paragraph_in_report_and_score(small_pair_dir, tmp_path):
    """`report table` on a store with a line damaged in the middle, and `score` on a responses file that is
    not UTF-8, ended in tracebacks (report's own, Hydra's)."""
    from cactus_bench.tools.report.__main__ import main as report_main
    from cactus_bench.tools.score import DataError, read_responses

    cfg = cfg_of(*TINY, "method=sps", "limit=3", results=tmp_path / "runs", pair_dir=small_pair_dir)
    run_mod.run(cfg)
    samples = run_dir(cfg) / "samples.jsonl"
    lines = samples.read_bytes().split(b"\n")
    samples.write_bytes(b"\n".join([lines[0], lines[1][:20], *lines[2:]]))  # cut in the middle
    spec = ROOT / "sweeps" / "demo.yaml"
    args = [str(spec), f"results={tmp_path / 'runs'}", f"out={tmp_path / 't'}", "limit=3", "m=2", "max_gen_toks=8"]
    out = run_main(report_main, "table", *args, *pair_overrides(small_pair_dir))
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and re.search(
        r"error: .*samples.jsonl, line 2, is not a valid sample.*sed -i '2d'", said
    )
    replies = tmp_path / "replies.jsonl"
    replies.write_bytes(b'{"id": "0", "response": "#### 4"}\n{"id": "1", "response": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"replies.jsonl:2: not UTF-8 text .* save the file as UTF-8"):
        read_responses(replies, "arith")


def test_a_table_of_another_store_is_written_beside_it(small_pair_dir, tmp_path, monkeypatch):
    """`report table results=<other store>` wrote into results/tables/, replacing the default store's table
    of the same spec."""
    from cactus_bench.tools.report.__main__ import main as report_main

    home = tmp_path / "home"
    monkeypatch.setenv("CACTUS_BENCH_RESULTS", str(home))
    (home / "tables").mkdir(parents=True)
    (home / "tables" / "demo.md").write_text("the default store's table")
    other = tmp_path / "other" / "runs"
    run_cell("sps", results=other, pair_dir=small_pair_dir, limit=2)
    report_main(
        [
            "table",
            str(ROOT / "sweeps" / "demo.yaml"),
            f"results={other}",
            "limit=2",
            "m=2",
            "max_gen_toks=8",
            *pair_overrides(small_pair_dir),
        ]
    )
    assert (home / "tables" / "demo.md").read_text() == "the default store's table"
    assert list((tmp_path / "other" / "tables").glob("demo*.md"))


def test_a_table_shows_only_runs_of_its_own_columns_dataset(small_pair_dir, tmp_path):
    """`report table sweeps/table1.yaml data=arith` put the arith runs into the gsm8k, ifeval and gpqa
    columns (its CSV said gsm8k): `data` is now the spec's key for `report` as for `sweep` (arith columns),
    and an override that moves a cell onto another dataset is refused in one paragraph."""
    from cactus_bench.tools.report.__main__ import main
    from cactus_bench.tools.report.specs import SpecError, compose_cell

    results = tmp_path / "runs"
    for method in ("ar", "sps"):
        run_cell(method, "m=20", "max_gen_toks=32", results=results, pair_dir=small_pair_dir, limit=2)
    args = ("table", "sweeps/table1.yaml", f"results={results}", f"out={tmp_path / 't'}", "pair=tiny", "data=arith")
    out = run_main(main, *args, "limit=2", "max_gen_toks=32", *pair_overrides(small_pair_dir))
    assert out.returncode == 0, out.stderr
    header = next(line for line in out.stdout.splitlines() if line.startswith("| label"))
    assert "arith score" in header and not any(d in header for d in ("gsm8k", "ifeval", "gpqa"))
    assert "| SpS " in out.stdout and "no run for SpS" not in out.stdout
    csv = next((tmp_path / "t").glob("*.csv")).read_text()
    assert "\narith," in csv and "gsm8k" not in csv
    spec = load_spec(ROOT / "sweeps" / "table1.yaml", {"pair": "tiny"})
    with pytest.raises(SpecError, match=r"data=arith would fill the 'gsm8k' cells of table1 with 'arith' runs"):
        compose_cell(spec, spec["rows"][1], "gsm8k", ["data=arith"])


@pytest.mark.parametrize("tool", ["report", "plan", "sweep"])
def test_a_misspelled_spec_path_is_one_paragraph(tool, tmp_path):
    """A spec path that is not there was a FileNotFoundError traceback in plan, report table and sweep."""
    import importlib

    main = importlib.import_module(f"cactus_bench.tools.{tool}" + (".__main__" if tool == "report" else "")).main
    args = ("table",) if tool == "report" else ()
    out = run_main(main, *args, "sweeps/tabel1.yaml", f"results={tmp_path}") if tool == "report" else None
    if tool != "report":
        out = run_main(main, *args, "sweeps/tabel1.yaml")
    assert out.returncode == 2, out
    said = out.stderr
    assert "no spec file sweeps/tabel1.yaml" in said and "sweeps/table1.yaml" in said and "Traceback" not in said


def test_a_summary_that_disagrees_with_its_samples_is_recomputed_and_said(small_pair_dir, tmp_path):
    """A samples.jsonl whose last line was cut, its old summary.json kept: `report table` printed the stale
    SpS row (n=4) beside rows at n=3, under a footnote saying every cell used the 3 shared items, with no
    message. The summary is recomputed from the samples, and the table says so."""
    results = tmp_path / "runs"
    for method in ("ar", "sps"):
        run_cell(method, results=results, pair_dir=small_pair_dir, limit=4)
    folder = run_dir(cfg_of(*TINY, "method=sps", results=results, pair_dir=small_pair_dir))
    lines = (folder / "samples.jsonl").read_text().splitlines()
    (folder / "samples.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:25])  # the last line cut
    spec = {**demo_spec(limit=4), "columns": ["score", "accepted_length"]}
    md, _ = render_table(spec, load_runs(results), tmp_path / "t", pair_overrides(small_pair_dir))
    sps = next(line for line in md.splitlines() if line.startswith("| SpS"))
    assert sps.rstrip(" |").endswith("3")  # n = 3, not the stale summary's 4
    assert "summary.json counts 4 items but its samples hold 3: its numbers are recomputed" in md


def test_a_store_whose_tables_folder_cannot_be_written_still_prints_the_table(small_pair_dir, tmp_path, caplog):
    """A read-only store (here: `out=` under a file, which even root cannot write) prints the table and says
    it wrote nothing; figures that cannot be written are one paragraph."""
    from cactus_bench.tools.report.__main__ import main

    results = tmp_path / "runs"
    run_cell("sps", results=results, pair_dir=small_pair_dir, limit=2)
    (tmp_path / "file").write_text("not a folder")
    common = (f"results={results}", f"out={tmp_path / 'file' / 'x'}", *pair_overrides(small_pair_dir))
    out = run_main(main, "table", "sweeps/demo.yaml", "limit=2", "m=2", "max_gen_toks=8", *common)
    assert out.returncode == 0 and "| SpS " in out.stdout and "written:" not in out.stdout, out.stderr[-2000:]
    assert "the table is printed only" in out.stderr + caplog.text
    out = run_main(main, "figures", *common)
    assert "cannot write the figures into" in one_paragraph(out)

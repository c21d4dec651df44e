"""`python -m cactus_bench.tools.runs`: the stored runs listed (setting, n, status), one run or one item shown, two
runs compared, without a spec file."""

import json

from cactus_bench.app.store import run_dir
from cactus_bench.tools.runs import main

from ..helpers.cli import run_main
from ..helpers.configs import cfg_of
from ..helpers.runs import TINY, run_cell, run_killed_after


def test_list_show_and_compare_stored_runs(small_pair_dir, tmp_path, monkeypatch):
    results = tmp_path / "runs"
    ar = run_cell("ar", results=results, pair_dir=small_pair_dir, limit=10)
    sps = run_cell("sps", results=results, pair_dir=small_pair_dir, limit=10)
    unfinished = cfg_of(*TINY, "method=cactus", "delta=0.5", "limit=10", results=results, pair_dir=small_pair_dir)
    run_killed_after(unfinished, 3, monkeypatch)

    listed = run_main(main, "list", f"results={results}")
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if line.startswith("| arith")]
    assert len(rows) == 3 and "3 run(s)" in listed.stdout
    by_key = {row.strip("|").split("|")[-1].strip(): row for row in rows}
    assert (
        "| 10 | complete |" in by_key[sps["run_key"]]
        and "| 3 | interrupted |" in by_key[run_dir(unfinished).name[-10:]]
    )
    only = run_main(main, "list", f"results={results}", "method=sps")
    assert [line for line in only.stdout.splitlines() if line.startswith("| arith")] == [by_key[sps["run_key"]]]

    shown = run_main(main, "show", sps["run_key"][:6], f"results={results}")
    assert (
        shown.returncode == 0
        and "status: complete; items: 10" in shown.stdout
        and "| AL (Σ rounds) |" in shown.stdout
        and "| AL (item mean) |" in shown.stdout
    )
    item = json.loads(
        (run_dir(cfg_of(*TINY, "method=sps", results=results, pair_dir=small_pair_dir)) / "samples.jsonl")
        .read_text()
        .splitlines()[2]
    )
    one = run_main(main, "show", sps["run_key"], f"item={item['id']}", f"results={results}")
    assert one.returncode == 0 and item["response"] in one.stdout and '"drafted"' in one.stdout

    compared = run_main(main, "compare", ar["run_key"], sps["run_key"], f"results={results}")
    assert compared.returncode == 0, compared.stderr
    assert "on the 10 items both decoded" in compared.stdout and "Δ score, paired by item" in compared.stdout
    assert "(n = 10)" in compared.stdout and "| AL (Σ rounds) |" in compared.stdout

    missing = run_main(main, "show", "ffffff", f"results={results}")
    assert missing.returncode == 2 and "no stored run has a key starting with 'ffffff'" in " ".join(
        missing.stderr.split()
    )

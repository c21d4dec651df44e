"""The serving sweep on vLLM (`scripts/bench_serving.py engines=vllm`), in the vLLM tier: vLLM's cells timed
the same way as the transformers engines' (requests at most B in flight, each request's first token read from
vLLM's streamed steps), with the same columns and checks as the default suite's small sweep."""

import pytest
import torch

from cactus_bench.core import metrics
from cactus_bench.core.decode.api import paired_decoder
from cactus_bench.tools.perf import serving
from cactus_bench.tools.perf.serving import VERIFIER, Cell

# the engines of the tier's other files (same m, KV cache and sequence length): started once per worker
pytestmark = [pytest.mark.vllm, pytest.mark.xdist_group("vllm-engines")]
SETTINGS = ["engine.name=eager", "engine.settings.kv_cache_gib=0.5", "engine.settings.max_model_len=1024"]


def test_vllms_serving_cells_have_every_column_and_agree_with_the_paired_timing():
    torch.set_num_threads(1)
    decoders, requests, title = serving.build_cells(
        "sweeps/demo.yaml", "smollm2", None, ["SpS"], [1, 2], [4], ["vllm"], 4, 8, SETTINGS
    )
    timed = serving.run_sweep(decoders, requests, repeats=3, log=lambda _: None)
    rows = serving.table_rows(timed)
    assert len(rows) == 4 and title == "smollm2 on arith"
    for r in rows:
        assert r["engine"] == "vllm" and r["tokens_per_s"] > 0 and r["same_tokens_as_b1"] is True, r
        for name in ("ttft", "tpot", "e2e"):
            p = r[name]
            assert p["p50"] <= p["p90"] <= p["p99"], (name, r)
        assert r["ttft"]["p99"] <= r["e2e"]["p99"]
        if r["method"] != VERIFIER:
            assert r["al"] >= 0 and len(r["acceptance_at"]) == 4 and r["speedup"][1] is not None
            assert r["predicted_speedup"] is None  # vLLM does not split a round into its parts

    sps = next(r for r in rows if r["method"] == "SpS" and r["batch"] == 1)
    paired = paired_decoder(decoders[Cell("SpS", 4, 1, "vllm")], decoders[Cell(VERIFIER, None, 1, "vllm")])
    est = metrics.paired_speedup(
        [{"stats": g.stats()} for _ in range(3) for g in paired.generate(requests)]
    )  # 12 items
    value, low, high, _ = sps["speedup"]
    assert est.low is not None and low <= est.high and est.low <= high, (sps["speedup"], est)


def test_vllms_own_sweep_plot_reads_the_cells_as_vllm_bench_serve_results(tmp_path):
    """The cells in `vllm bench serve`'s format, read by vLLM's own `vllm bench sweep plot` (a dry run: this
    venv has no seaborn) and by its loader: every record has the metrics it plots, with vLLM's values for
    the speculative counters (acceptance length 1 + accepted / drafts, which vLLM's engine also counts)."""
    from vllm.benchmarks.sweep import plot

    from cactus_bench.tools.perf import vllm_format

    torch.set_num_threads(1)
    decoders, requests, _ = serving.build_cells(
        "sweeps/demo.yaml", "smollm2", None, ["SpS"], [2], [4], ["vllm"], 4, 8, SETTINGS
    )
    timed = serving.run_sweep(decoders, requests, repeats=2, log=lambda _: None)
    vllm_format.write(timed, tmp_path / "sweep", "smollm2")
    plot.plot(
        tmp_path / "sweep", tmp_path / "figures", [], [], [], ["method"], var_x="max_num_seqs",
        var_y="output_throughput", filter_by=plot.PlotFilters(), bin_by=plot.PlotBinners(), scale_x=None,
        scale_y=None, dry_run=True,
    )  # fmt: skip
    records = [r for p in (tmp_path / "sweep").rglob("**/summary.json") for r in plot._json_load_bytes(p)]
    assert len(records) == 4  # two cells, two repeats each
    for r in plot._convert_inf_nan_strings(records):
        for key in ("output_throughput", "median_ttft_ms", "p99_tpot_ms", "mean_itl_ms", "max_num_seqs"):
            assert plot._get_metric(r, key) is not None, key
        assert r["completed"] == len(requests) and len(r["itls"]) == len(requests)
        if r["method"] == "SpS":
            assert (
                r["spec_decode_acceptance_length"] == 1 + r["spec_decode_accepted_tokens"] / r["spec_decode_num_drafts"]
            )
            assert len(r["spec_decode_per_position_acceptance_rates"]) == 4

"""The serving sweep's cells in `vllm bench serve`'s result format (`tools/perf/vllm_format.py`): every latency
by vLLM's definitions, computed here with numpy as vLLM's `calculate_metrics` computes them, its spec-decode
counters by hand, and the sweep layout `vllm bench sweep plot` reads (the vLLM tier loads it with vLLM's code)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cactus_bench.tools.perf import vllm_format
from cactus_bench.tools.perf.serving import VERIFIER, Cell, Decoded


def _decoded() -> Decoded:
    """Three requests sent at once: chunk times 0.4 (1 token), 0.5 / 0.7 / 1.6 (2 + 3 + 1 tokens), 1.2 / 2.5."""
    stats = [
        {"stats": {"new_tokens": 1, "verifier_calls": 1, "drafted": 0, "accepted": 0, "accepted_any": 0,
                   "accepted_hist": [1, 0, 0], "tested_at": [0, 0]}},
        {"stats": {"new_tokens": 6, "verifier_calls": 3, "drafted": 6, "accepted": 3, "accepted_any": 3,
                   "accepted_hist": [1, 1, 1], "tested_at": [3, 2]}},
        {"stats": {"new_tokens": 4, "verifier_calls": 2, "drafted": 4, "accepted": 2, "accepted_any": 2,
                   "accepted_hist": [0, 2, 0], "tested_at": [2, 2]}},
    ]  # fmt: skip
    tokens = {"a": [1], "b": [1, 2, 3, 4, 5, 6], "c": [1, 2, 3, 4]}
    done = Decoded(3.0, tokens, [0.4, 0.5, 1.2], [], [0.4, 1.6, 2.5], stats)
    done.itl = [[], [0.2, 0.9], [1.3]]
    done.tpot = [(1.6 - 0.5) / 5, (2.5 - 1.2) / 3]  # as `decode_workload` computes them
    done.prompt_tokens, done.texts = [10, 12, 9], ["x", "y", "z"]
    return done


def test_latencies_follow_vllms_definitions():
    """TPOT over requests of two tokens or more, the first excluded; ITL every gap pooled; population std,
    numpy's percentiles; throughputs over the duration."""
    cell = Cell("SpS", 2, 4, "eager")
    result = vllm_format.run_result(cell, _decoded(), "tiny", 0)
    ttft, lat = np.array([0.4, 0.5, 1.2]), np.array([0.4, 1.6, 2.5])
    outputs = np.array([1, 6, 4])
    tpot = [(la - t) / (n - 1) for t, la, n in zip(ttft, lat, outputs) if n > 1]
    itl = [0.2, 0.9, 1.3]
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", lat)):
        assert result[f"mean_{name}_ms"] == pytest.approx(np.mean(values) * 1000)
        assert result[f"median_{name}_ms"] == pytest.approx(np.median(values) * 1000)
        assert result[f"std_{name}_ms"] == pytest.approx(np.std(values) * 1000)
        for q in (50, 90, 99):
            assert result[f"p{q}_{name}_ms"] == pytest.approx(np.percentile(values, q) * 1000)
    assert result["completed"] == 3 and result["total_output_tokens"] == 11 and result["total_input_tokens"] == 31
    assert result["output_throughput"] == pytest.approx(11 / 3.0) and result["request_throughput"] == 1.0
    assert result["total_token_throughput"] == pytest.approx(42 / 3.0)
    assert result["output_lens"] == [1, 6, 4] and result["itls"] == [[], [0.2, 0.9], [1.3]]
    assert result["request_rate"] == "inf" and result["max_num_seqs"] == 4 and result["num_speculative_tokens"] == 2
    # chunks per second from the burst's start: 0.4, 0.5, 0.7 in second 0; 1.2, 1.6 in second 1; 2.5 in 2
    assert result["max_output_tokens_per_s"] == 3.0 and result["max_concurrent_requests"] == 3


def test_spec_decode_counters_are_vllms():
    """Drafts: rounds that tested a first draft (5 here, the one-token request's prefill call has none);
    acceptance length 1 + accepted / drafts; per position the rounds that accepted at least j drafts over drafts."""
    result = vllm_format.run_result(Cell("SpS", 2, 4, "eager"), _decoded(), "tiny", 0)
    assert result["spec_decode_num_drafts"] == 5 and result["spec_decode_draft_tokens"] == 10
    assert result["spec_decode_accepted_tokens"] == 5
    assert result["spec_decode_acceptance_rate"] == pytest.approx(50.0)
    assert result["spec_decode_acceptance_length"] == pytest.approx(1 + 5 / 5)
    # accepted_hist pooled [2, 3, 1]: at least 1 accepted in 4 rounds, at least 2 in 1
    assert result["spec_decode_per_position_acceptance_rates"] == pytest.approx([4 / 5, 1 / 5])
    alone = _decoded()
    alone.samples = alone.samples[:1]
    assert "spec_decode_num_drafts" not in vllm_format.run_result(Cell(VERIFIER, None, 4, "eager"), alone, "t", 0)


def test_a_sweep_is_laid_out_as_vllms_sweep(tmp_path):
    """A folder per cell with run=<k>.json per repeat and summary.json listing them, which `vllm bench sweep
    plot` finds by `rglob("**/summary.json")` and reads as one record per run."""
    timed = {Cell("SpS", 2, 4, "eager"): [_decoded(), _decoded()], Cell(VERIFIER, None, 4, "eager"): [_decoded()]}
    summaries = vllm_format.write(timed, tmp_path / "serving_vllm", "tiny")
    assert sorted(summaries) == sorted((tmp_path / "serving_vllm").rglob("**/summary.json")) and len(summaries) == 2
    records = [r for p in summaries for r in json.loads(p.read_text())]
    assert [r["run_number"] for r in records] == [0, 1, 0]
    assert all(isinstance(r["output_throughput"], float) and r["method"] for r in records)
    run = json.loads((summaries[0].parent / "run=1.json").read_text())
    assert run == json.loads(summaries[0].read_text())[1] | {"date": run["date"]}

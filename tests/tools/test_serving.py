"""The serving sweep (`scripts/bench_serving.py`, `tools/perf/serving.py`): its latency arithmetic, its
speedup interval, and its small mode end to end on the embedded pair: every column, percentiles in order,
the same tokens at every batch size, and the B = 1 cells' speedup agreeing with the paired timing a run uses."""

from __future__ import annotations

import importlib.util
import math
import random

import numpy as np
import pytest
import torch

from cactus_bench.core.decode import Generation, Request
from cactus_bench.core.decode.api import paired_decoder
from cactus_bench.core.decode.stats import GenerationOutput, Rounds
from cactus_bench.tools.perf import serving
from cactus_bench.tools.perf.serving import VERIFIER, Cell, Decoded


def test_percentile_is_numpys_linear_interpolation():
    rng = random.Random(0)
    for n in (1, 2, 7, 33):
        xs = [rng.lognormvariate(0, 1) for _ in range(n)]
        for q in (0, 50, 90, 99, 100):
            assert serving.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)
    assert serving.percentile([], 50) is None


def test_repeat_ratio_is_the_ratio_of_totals_with_a_t_interval_on_log_ratios():
    base, method = [2.0, 2.2, 1.9, 2.1], [1.0, 1.2, 0.9, 1.0]
    est = serving.repeat_ratio(base, method)
    assert est.value == pytest.approx(sum(base) / sum(method))
    logs = np.log(np.array(base) / np.array(method))
    half = 3.182446305284263 * logs.std(ddof=1) / math.sqrt(4)  # t(3)
    assert est.low == pytest.approx(est.value * math.exp(-half)) and est.high == pytest.approx(
        est.value * math.exp(half)
    )
    assert serving.repeat_ratio([2.0, 2.0], [1.0, 1.0]).low is None  # no interval from two repeats


def _output(tokens: int, prefill: float, round_time: float, wall: float, drafted: bool = True) -> GenerationOutput:
    r = Rounds()
    for _ in range(tokens):
        r.add(
            drafted=1 if drafted else 0, accepted=0, accepted_any=0, emitted=1, t_draft=0.0, t_verify=round_time,
            t_rule=0.0, t_other=0.0, kl_sum=0.0, kl_count=0, out_kl_sum=0.0, out_kl_count=0, out_kl_skipped=0,
        )  # fmt: skip
    chunks = [prefill + round_time * (i + 1) for i in range(tokens)]  # a round's end streams its token
    return GenerationOutput(list(range(tokens)), r, prefill, wall, "length", chunk_times=chunks, prompt_tokens=7)


class FakeDecoder:
    """Yields prepared generations, advancing a fake clock to each one's finish."""

    device = "cpu"

    def __init__(self, clock, finishes):
        self.clock, self.finishes = clock, finishes

    def generate(self, requests):
        for req, (finish, out) in zip(requests, self.finishes):
            self.clock.now = finish
            yield Generation(req, out, "", "")


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_latencies_count_queueing_prefill_and_the_first_round():
    """A request admitted at 3 s (finish 8 s − wall 5 s), prefill 0.5 s, first round 0.25 s: TTFT 3.75 s;
    its other 4 tokens took 8 − 3.75 s."""
    clock = Clock()
    outs = [(8.0, _output(5, 0.5, 0.25, 5.0)), (9.0, _output(1, 0.1, 0.2, 1.0))]
    done = serving.decode_workload(FakeDecoder(clock, outs), [Request("a", 0), Request("b", 1)], clock=clock)
    assert done.e2e == [8.0, 9.0] and done.seconds == 9.0
    assert done.ttft == pytest.approx([3.75, 8.3])
    assert done.tpot == pytest.approx([(8.0 - 3.75) / 4])  # a one-token reply has no TPOT


def test_itl_is_the_gaps_between_a_requests_streamed_chunks():
    """vLLM's ITL: one gap per chunk after the first (a round's tokens stream together); a request that
    streamed nothing has no TTFT."""
    clock = Clock()
    three = _output(3, 0.5, 0.25, 2.0)
    three.chunk_times = [0.75, 1.0, 1.75]  # the last round took longer
    silent = _output(1, 0.0, 0.0, 1.0)
    silent.chunk_times = []
    done = serving.decode_workload(
        FakeDecoder(clock, [(2.0, three), (3.0, silent)]), [Request("a", 0), Request("b", 1)], clock=clock
    )
    assert done.itl == [pytest.approx([0.25, 0.75]), []] and done.ttft == [0.75]
    assert done.prompt_tokens == [7, 7] and done.texts == ["", ""]


def _decoded(seconds: float, tokens: dict) -> Decoded:
    stats = {"stats": {"new_tokens": 1, "verifier_calls": 1, "drafted": 0, "t_verify": seconds}}
    return Decoded(seconds, tokens, [0.1], [0.01], [seconds], [stats])


def test_same_tokens_is_false_when_any_batch_size_differs():
    one, other = {0: [1, 2], 1: [3]}, {0: [1, 2], 1: [4]}
    timed = {
        Cell(VERIFIER, None, 1, "eager"): [_decoded(1.0, one)] * 3,
        Cell(VERIFIER, None, 4, "eager"): [_decoded(0.5, one), _decoded(0.5, other), _decoded(0.5, one)],
    }
    rows = {r["batch"]: r for r in serving.table_rows(timed)}
    assert rows[1]["same_tokens_as_b1"] is True and rows[4]["same_tokens_as_b1"] is False


def test_best_m_is_the_fastest_draft_length_at_each_batch_size():
    rows = [
        {"engine": "eager", "method": "SpS", "batch": 1, "m": 2, "tokens_per_s": 10.0},
        {"engine": "eager", "method": "SpS", "batch": 1, "m": 4, "tokens_per_s": 12.0},
        {"engine": "eager", "method": "SpS", "batch": 8, "m": 4, "tokens_per_s": 30.0},
        {"engine": "eager", "method": "SpS", "batch": 8, "m": 2, "tokens_per_s": 31.0},
        {"engine": "eager", "method": VERIFIER, "batch": 8, "m": None, "tokens_per_s": 99.0},
    ]
    assert serving.best_m(rows) == {("eager", "SpS", 1): 4, ("eager", "SpS", 8): 2}


def test_small_sweep_end_to_end(tmp_path):
    """The small mode's cells on the embedded pair: every column filled, P50 <= P90 <= P99, each request's
    tokens the same at B = 4 as at B = 1, and the B = 1 speedup inside the paired timing's interval (a run's
    `paired_speedup`, decoded beside it in the same process)."""
    torch.set_num_threads(1)
    small = serving_small()
    decoders, requests, title = serving.build_cells("sweeps/demo.yaml", None, None, **small)
    timed = serving.run_sweep(decoders, requests, repeats=3, log=lambda _: None)
    rows = serving.table_rows(timed)
    assert len(rows) == 2 + 2 * 2 * 1 and title == "tiny on arith"
    for r in rows:
        assert r["tokens_per_s"] > 0 and r["same_tokens_as_b1"] is True, r
        for name in ("ttft", "tpot", "e2e"):
            p = r[name]
            assert p["p50"] <= p["p90"] <= p["p99"], (name, r)
        if r["method"] != VERIFIER:
            assert r["al"] > 0 and len(r["acceptance_at"]) == r["m"] and r["speedup"][1] is not None
            assert r["predicted_speedup"] > 0
    table = serving.markdown(rows)
    table_lines = [line for line in table.splitlines() if line.startswith("|")]  # notes (busy) follow it
    assert len(table_lines) == len(rows) + 2 and "TTFT ms P50 / P90 / P99" in table

    from cactus_bench.core import metrics

    sps = next(r for r in rows if r["method"] == "SpS" and r["m"] == 4 and r["batch"] == 1)
    paired = paired_decoder(decoders[Cell("SpS", 4, 1, "eager")], decoders[Cell(VERIFIER, None, 1, "eager")])
    runs = [{"stats": g.stats()} for _ in range(2) for g in paired.generate(requests)]
    est = metrics.paired_speedup(runs)
    value, low, high, _ = sps["speedup"]
    assert est.low is not None and low <= est.high and est.low <= high, (sps["speedup"], est)


def serving_small() -> dict:
    """The sweep's small mode as `build_cells` takes it (the script's SMALL, one method)."""
    return {
        "labels": ["SpS"],
        "batches": [1, 4],
        "ms": [2, 4],
        "engines": ["eager"],
        "items": 10,
        "max_gen_toks": 16,
    }


def test_bad_input_is_refused_before_any_model_loads():
    from cactus_bench.tools.report.specs import SpecError

    if importlib.util.find_spec("vllm") is None:  # vLLM's cells are refused where vLLM is not installed
        from cactus_bench.app.config import ConfigError
        from cactus_bench.backends.vllm import INSTALL

        with pytest.raises(ConfigError) as e:
            serving.build_cells("sweeps/demo.yaml", None, None, **{**serving_small(), "engines": ["vllm"]})
        assert str(e.value) == INSTALL
    with pytest.raises(SpecError, match=r"rows=Nope: not a row of sweeps/demo.yaml \(its rows: Verifier, SpS"):
        serving.build_cells("sweeps/demo.yaml", None, None, **{**serving_small(), "labels": ["Nope"]})


def test_a_speedup_timed_on_a_busy_machine_or_while_compiling_is_marked():
    tokens = {0: [1, 2]}
    quiet = {
        Cell(VERIFIER, None, 1, "eager"): [_decoded(1.0, tokens)] * 3,
        Cell("SpS", 4, 1, "eager"): [_decoded(0.8, tokens)] * 3,
    }
    assert "(busy)" not in serving.markdown(serving.table_rows(quiet))
    busy = dict(quiet)
    busy[Cell(VERIFIER, None, 1, "eager")] = [
        _decoded(1.0, tokens),
        Decoded(1.0, tokens, load=1.5),
        _decoded(1.0, tokens),
    ]
    table = serving.markdown(serving.table_rows(busy))
    assert "1.25× [1.25, 1.25] (busy)" in table and "timed on a busy machine" in table
    compiling = dict(quiet)
    compiling[Cell("SpS", 4, 1, "eager")] = [
        _decoded(0.8, tokens),
        Decoded(0.8, tokens, compiled=2),
        _decoded(0.8, tokens),
    ]
    table = serving.markdown(serving.table_rows(compiling))
    assert "1.25× [1.25, 1.25] (compiled)" in table and "compiled graphs: its time holds compiling" in table


def test_no_speedup_is_predicted_where_a_round_is_not_split_into_its_parts():
    """vLLM records a request's one wall time, not draft, verify and rule: a prediction from it would only
    restate the measured ratio."""
    split = {"new_tokens": 6, "verifier_calls": 2, "drafted": 8, "t_draft": 0.2, "t_verify": 0.4, "t_rule": 0.0}
    base = {"new_tokens": 6, "verifier_calls": 6, "drafted": 0, "t_verify": 1.2, "t_rule": 0.0, "t_other": 0.0}
    assert serving.predicted_speedup([{"stats": {**split, "t_other": 0.0}}], [{"stats": base}]) == pytest.approx(
        3 * 0.2 / 0.3
    )
    whole = {**split, "t_draft": 0.0, "t_verify": 0.0, "t_other": 0.6}
    assert serving.predicted_speedup([{"stats": whole}], [{"stats": {**base, "t_verify": 0.0, "t_other": 1.2}}]) is None

"""The cost model (core/metrics/cost_model.py) and the second speedup definition, each by hand: the parts of
a paired decode, the prediction from them and the run's acceptance profile, and the mean of per-item ratios."""

import pytest
import torch

from cactus_bench.core import metrics
from cactus_bench.core.decode.api import paired_record
from cactus_bench.core.decode.stats import NOTHING_COUNTED, GenerationOutput, Rounds


def timed_item(i, *, tokens=12, calls=4, drafted=12, draft=0.004, verify=0.02, prefill=0.01, outside=0.002,
               base_tokens=12, base_verify=0.06, base_prefill=0.005, base_outside=0.003):  # fmt: skip
    """One timed sample whose paired decode took these parts (seconds, summed over its rounds)."""
    method_time = prefill + draft + verify + outside
    base_time = base_prefill + base_verify + base_outside
    stats = {
        "new_tokens": tokens, "verifier_calls": calls, "drafted": drafted,
        "paired_method_time": method_time, "paired_baseline_time": base_time,
        "paired_method_tokens": tokens, "paired_method_calls": calls, "paired_method_drafted": drafted,
        "paired_method_draft_time": draft, "paired_method_verify_time": verify,
        "paired_method_prefill_time": prefill, "paired_baseline_tokens": base_tokens,
        "paired_baseline_verify_time": base_verify, "paired_baseline_prefill_time": base_prefill,
    }  # fmt: skip
    return {"id": i, "stats": stats}


def test_the_parts_by_hand():
    """t_d = 0.004 s / 12 drafts; t_{m+1} = 0.02 / 4 calls; t₁ = 0.06 / 12 tokens; c = t_d / t₁ = 1/15; the
    method spends 0.002 of its 0.026 s of rounds outside forwards."""
    samples = [timed_item(i) for i in range(3)]
    assert metrics.read("draft_step_ms", samples).value == pytest.approx(4 / 12)
    assert metrics.read("verify_round_ms", samples).value == pytest.approx(5.0)
    assert metrics.read("verify_1_ms", samples).value == pytest.approx(5.0)
    assert metrics.read("cost_ratio", samples).value == pytest.approx((0.004 / 12) / (0.06 / 12))
    assert metrics.read("outside_share", samples).value == pytest.approx(0.002 / 0.026)


def test_with_every_item_timed_the_prediction_is_the_measurement():
    """The parts add up to each decode's wall time, so with the timed items' own τ and k̄ the formula gives
    the ratio of totals exactly, over items of any mix of lengths."""
    samples = [timed_item(0), timed_item(1, tokens=30, calls=9, drafted=36, draft=0.012, verify=0.05, base_tokens=28,
                                           base_verify=0.14)]  # fmt: skip
    measured = sum(s["stats"]["paired_baseline_time"] for s in samples) / sum(
        s["stats"]["paired_method_time"] for s in samples
    )
    assert metrics.read("predicted_speedup", samples).value == pytest.approx(measured, rel=1e-12)


def test_a_timing_sample_is_predicted_with_the_runs_acceptance():
    """Untimed items change τ and k̄ (the run's), not the step costs: a run whose other items emit twice the
    tokens per call at the same drafts per call needs half the rounds for the timed items' tokens."""
    timed = timed_item(0)
    c = timed["stats"]
    others = [{"id": i, "stats": {"new_tokens": 24, "verifier_calls": 4, "drafted": 12}} for i in range(1, 4)]
    run = [timed, *others]
    tau, k = (12 + 72) / 16, 48 / 16
    rounds = 12 / tau
    t_d, t_v, o = 0.004 / 12, 0.02 / 4, 0.002 / 4
    want = (c["paired_baseline_time"]) / (c["paired_method_prefill_time"] + rounds * (k * t_d + t_v + o))
    assert metrics.read("predicted_speedup", run).value == pytest.approx(want)
    assert metrics.read("predicted_speedup", [dict(s, stats={}) for s in others]).value is None  # none timed


def test_the_two_speedup_definitions_by_hand():
    """Items sped up 2× (1 s against 0.5 s) and 1× (0.1 s against 0.1 s): the ratio of totals is 1.1 / 0.6,
    the mean of per-item ratios 1.5; each named in its label."""
    samples = [
        {"id": i, "stats": {"paired_baseline_time": 1.0 if i % 2 else 0.1, "paired_method_time": 0.5 if i % 2 else 0.1}}
        for i in range(10)
    ]
    assert metrics.read("paired_speedup", samples).value.value == pytest.approx(1.1 / 0.6)
    mean = metrics.read("item_paired_speedup", samples).value
    assert mean.value == pytest.approx(1.5) and mean.low < 1.5 < mean.high
    labels = {metrics.METRICS.get(n).label for n in ("paired_speedup", "item_paired_speedup", "predicted_speedup")}
    assert labels == {
        "speedup (paired, ratio of totals)", "speedup (paired, mean of items)", "speedup (predicted, cost model)",
    }  # fmt: skip


def test_a_paired_record_holds_each_decodes_parts():
    r = Rounds()
    for drafted, accepted, t in ((3, 3, 0.01), (3, 1, 0.02)):
        counted = {**NOTHING_COUNTED, "drafted": drafted}
        r.record(counted, accepted, accepted + 1, (t, 2 * t, 0.0))
    method = GenerationOutput([1] * 6, r, prefill_time=0.5, wall_time=1.0, stop_reason="eos")
    b = Rounds()
    for _ in range(5):
        b.record_token(t_verify=0.1)
    baseline = GenerationOutput([1] * 5, b, prefill_time=0.2, wall_time=0.9, stop_reason="eos")
    rec = paired_record(method, baseline, baseline_first=True)
    assert rec["paired_method_calls"] == 2 and rec["paired_method_drafted"] == 6 and rec["paired_method_tokens"] == 6
    assert rec["paired_method_draft_time"] == pytest.approx(0.03) and rec["paired_method_verify_time"] == pytest.approx(
        0.06
    )
    assert rec["paired_baseline_verify_time"] == pytest.approx(0.5) and rec["paired_baseline_tokens"] == 5
    assert (rec["paired_method_prefill_time"], rec["paired_baseline_prefill_time"]) == (0.5, 0.2)
    assert set(rec) <= set(metrics.COUNTERS) | {"paired_baseline_first"}  # every part is summed over seeds and turns


def test_a_runs_paired_speedup_against_spss_by_hand():
    """Cactus timed 1.0 / 0.4 and SpS 1.2 / 0.6 on the same items, each against its own verifier-alone decode:
    (Σ 1.0 / Σ 0.4) / (Σ 1.2 / Σ 0.6) = 2.5 / 2 = 1.25, with a jackknife interval over items; items only one
    run timed are left out; a timing under other conditions on either side is flagged."""

    def timed(i, base, method, host="a"):
        stats = {"paired_baseline_time": base, "paired_method_time": method}
        return {"id": i, "stats": stats, "timing_conditions": {"host": host, "batch_size": 1}}

    cactus = [timed(i, 1.0 + 0.01 * i, 0.4 + 0.004 * i) for i in range(12)]
    sps = [timed(i, 1.2 + 0.012 * i, 0.6 + 0.006 * i) for i in range(11)]
    est = metrics.read("paired_speedup_vs_sps", cactus, {"sps": sps}).value
    assert est.value == pytest.approx(1.25) and est.items == 11 and est.low <= 1.25 <= est.high
    sps[3]["timing_conditions"] = {"host": "b", "batch_size": 1}
    reading = metrics.read("paired_speedup_vs_sps", cactus, {"sps": sps})
    assert reading.flagged and "2 conditions" in reading.caveat


@pytest.mark.slow  # decodes 24 prompts and times 16 of them twice on a launch-bound pair: about 20 s
def test_on_the_launch_bound_pair_the_prediction_lies_inside_the_measured_interval():
    """bench-speed's launch-bound pair (a 1-layer drafter of an 8-layer 256-wide verifier: forwards of a few
    ms, where the loop's own time weighs most), SpS at m = 4, T = 1 as bench-speed runs it: a run of 24
    prompts gives τ and k̄, 16 of them are timed beside the verifier alone (back to back, alternating which goes
    first, the run's own random streams), and the cost model's prediction from the timed step costs and the
    run's acceptance lies inside the measured paired speedup's interval. The prediction is not the
    measurement: the timed prompts' τ is not the run's."""
    from cactus_bench.core.decode import autoregressive_generate, speculative_generate
    from cactus_bench.tools.perf.shapes import PAIRS

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        drafter, verifier = PAIRS["launch"]()
        prompts = [
            torch.randint(0, 2048, (24,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(24)
        ]

        def options(i):
            return {"max_new_tokens": 48, "temperature": 1.0, "generator": torch.Generator().manual_seed(1000 + i)}

        def sps(i):
            return speculative_generate(drafter, verifier, prompts[i], rule="sps", m=4, **options(i))

        def alone(i):
            return autoregressive_generate(verifier, prompts[i], **options(i))

        sps(0), alone(0)  # warm up (first calls allocate and initialise)
        run = [sps(i) for i in range(24)]
        samples = [{"id": i, "stats": out.counters()} for i, out in enumerate(run)]
        for n, i in enumerate(i for i in range(24) if i % 3 != 2):  # the timing sample: 16 of the 24
            first = n % 2 == 0
            if first:
                base, out = alone(i), sps(i)
            else:
                out, base = sps(i), alone(i)
            assert out.tokens == run[i].tokens  # the run's own decode, timed again
            samples[i]["stats"] |= paired_record(out, base, first)
    finally:
        torch.set_num_threads(threads)
    measured = metrics.read("paired_speedup", samples).value
    predicted = metrics.read("predicted_speedup", samples).value
    timed = [s["stats"] for s in samples if "paired_method_time" in s["stats"]]
    tau_timed = sum(s["new_tokens"] for s in timed) / sum(s["verifier_calls"] for s in timed)
    tau_run = sum(s["stats"]["new_tokens"] for s in samples) / sum(s["stats"]["verifier_calls"] for s in samples)
    assert measured.items == 16 and tau_timed != tau_run
    assert measured.low <= predicted <= measured.high, (predicted, measured, tau_timed, tau_run)

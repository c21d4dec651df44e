"""The intervals behind every comparison the tables print (docs/statistics.md): each formula against a case
worked by hand, and each interval's coverage in seeded simulations, with a negative control that a wrong
formula fails."""

import math
import random

import pytest

from cactus_bench import intervals, metrics

EXACT_T95 = {5: 2.570581836, 10: 2.228138852, 30: 2.042272456, 199: 1.971956544}


def test_t_quantiles():
    assert intervals.t95(3) == pytest.approx(3.182446305, abs=1e-9)
    for df, exact in EXACT_T95.items():
        assert intervals.t95(df) == pytest.approx(exact, rel=1.2e-3 if df == 5 else 1e-4)


def test_paired_difference_by_hand():
    """Scores 100/0/100/100 against 100/0/0/100: d = 0, 0, 100, 0; mean 25, sample deviation 50, standard
    error 25, half-width t(3) x 25 = 79.56. Items only one run scored are left out."""
    method = [{"id": i, "score": s} for i, s in enumerate([100, 0, 100, 100, 100])]
    ref = [{"id": i, "score": s} for i, s in enumerate([100, 0, 0, 100])] + [{"id": 9, "score": 0}]
    est = intervals.paired_difference(method, ref)
    assert est.items == 4 and est.value == 25
    assert (est.low, est.high) == pytest.approx((25 - 3.182446305 * 25, 25 + 3.182446305 * 25))


def test_ratio_interval_by_hand():
    """(a, b) = (1, 2), (3, 2), (2, 4): R = 6/8 = 0.75; residuals a − R·b = −0.5, 1.5, −1 (squares 3.5);
    var = 3/2 · 3.5 / 64; half-width t(2) · sqrt(var) = 4.3027 · 0.28641 = 1.2323."""
    est = intervals.ratio_interval([(1, 2), (3, 2), (2, 4)])
    half = 4.302652729749464 * math.sqrt(1.5 * 3.5 / 64)
    assert est.value == 0.75 and (est.low, est.high) == pytest.approx((0.75 - half, 0.75 + half))


def simulated_pair(rng, n, effect):
    """Per-item scores of two runs on the same n items: each item has its own difficulty (shared by both
    runs: what pairing removes); the method solves it with probability p_i + effect."""
    method, ref = [], []
    for i in range(n):
        p = rng.uniform(0.2, 0.75)
        ref.append({"id": i, "score": 100.0 * (rng.random() < p)})
        method.append({"id": i, "score": 100.0 * (rng.random() < p + effect)})
    return method, ref


def excludes_zero(est) -> bool:
    return est.low > 0 or est.high < 0


def test_a_known_difference_is_detected_and_none_is_flagged_at_about_alpha():
    """400 simulated pairs of runs of 200 items: with no difference the interval excludes 0 in about 5 % of
    them; with a 15-point difference in about 90 % (this design's power: the per-item differences' deviation
    is ≈ 63 points, so the standard error is ≈ 4.5 and 15 points lie ≈ 3.3 of them from 0)."""
    rng = random.Random(0)
    null = sum(excludes_zero(intervals.paired_difference(*simulated_pair(rng, 200, 0.0))) for _ in range(400))
    assert 8 <= null <= 32  # 5 % of 400 = 20; a binomial 99.9 % range
    hits = sum(excludes_zero(intervals.paired_difference(*simulated_pair(rng, 200, 0.15))) for _ in range(200))
    assert 160 <= hits


def test_control_a_halved_standard_error_flags_too_often(monkeypatch):
    """The null test above has teeth: intervals half as wide (a wrong standard error) exclude 0 far more
    often than 5 %."""
    real = intervals.t95
    monkeypatch.setattr(intervals, "t95", lambda df: real(df) / 2)
    rng = random.Random(0)
    null = sum(excludes_zero(intervals.paired_difference(*simulated_pair(rng, 200, 0.0))) for _ in range(400))
    assert null > 60


def simulated_rounds(rng, items, m=4):
    """Per-item (accepted, verifier calls): each item has its own acceptance probability (its rounds are
    alike: correlated within the item), and its own number of rounds. The population AL is m · E[q] = 2."""
    pairs, rounds = [], []
    for _ in range(items):
        q, k = rng.uniform(0.1, 0.9), rng.randint(5, 30)
        accepted = [sum(rng.random() < q for _ in range(m)) for _ in range(k)]
        pairs.append((sum(accepted), k))
        rounds.extend((a, 1) for a in accepted)
    return pairs, rounds


def test_the_clustered_ratio_interval_covers_at_about_95_percent_and_a_per_round_one_does_not():
    """AL is a ratio of sums over items whose rounds are correlated: the interval clustered by item covers the
    population AL in about 95 % of 300 simulated runs; treating every round as independent (the control)
    gives intervals too narrow, covering far less often."""
    rng = random.Random(1)
    clustered = per_round = 0
    for _ in range(300):
        pairs, rounds = simulated_rounds(rng, 40)
        c, r = intervals.ratio_interval(pairs), intervals.ratio_interval(rounds)
        clustered += c.low <= 2.0 <= c.high
        per_round += r.low <= 2.0 <= r.high
    assert 270 <= clustered <= 300  # 95 % of 300 = 285
    assert per_round < 240


def test_summaries_carry_intervals_for_every_rate():
    samples = [
        {"id": i, "stats": {**dict.fromkeys(metrics.COUNTERS, 0), **s}}
        for i, s in enumerate(
            [
                {"accepted": 3, "accepted_any": 4, "drafted": 8, "verifier_calls": 2, "new_tokens": 5, "rejected": 5},
                {"accepted": 6, "accepted_any": 6, "drafted": 8, "verifier_calls": 2, "new_tokens": 8, "rejected": 2},
                {"accepted": 1, "accepted_any": 3, "drafted": 8, "verifier_calls": 2, "new_tokens": 3, "rejected": 7},
            ]
        )
    ]
    out = metrics.decode_metrics(samples)
    for name in ("accepted_length", "tau", "acceptance_rate", "prefix_acceptance", "rejected_per_token"):
        low, high = out[f"{name}_ci"]
        assert low < out[name] < high, name
    assert "target_kl_ci" not in out  # no KL counted: no figure, no interval


def test_the_detectable_difference_by_hand_and_in_the_plan():
    """(z_0.975 + z_0.8) · sd / sqrt(n): sd 50 over 100 items gives 14.01 points. The plan states it per cell
    at the paper's item counts: with no stored runs, assumed independent decodes at accuracy 0.5 (sd 70.7):
    5.45 points for GSM8K's 1,319 items, 14.08 for GPQA Diamond's 198."""
    from cactus_bench.plan import main

    assert intervals.detectable_difference(50, 100) == pytest.approx(14.0088, abs=1e-3)
    text = main(["sweeps/table1.yaml", "gpu=h200"])
    header = next(line for line in text.splitlines() if line.startswith("| data"))
    cols = [c.strip() for c in header.strip("|").split("|")]

    def cell(data, row):
        line = next(x for x in text.splitlines() if x.startswith(f"| {data}") and f"| {row} " in x)
        return [c.strip() for c in line.strip("|").split("|")][cols.index("detectable Δ (pts)")]

    assert cell("gsm8k", "SpS") == "5.45" and cell("gpqa", "TAS") == "14.08"
    assert cell("gsm8k", "Verifier") == ""  # no difference to detect against itself


def test_a_table_says_when_a_difference_is_below_what_its_items_detect():
    from cactus_bench.report.tables import below_detectable

    small = below_detectable("score_delta", {"score_delta": 1.0, "score_delta_ci": [-5.0, 7.0], "score_delta_n": 100})
    assert small and "below the 8.5 points 100 items can detect" in small
    assert (
        below_detectable("score_delta", {"score_delta": 10.0, "score_delta_ci": [4.0, 16.0], "score_delta_n": 100})
        is None
    )
    assert below_detectable("accepted_length", {"accepted_length": 0.1}) is None


def test_a_speedup_timed_on_a_busy_machine_is_flagged_and_a_quiet_one_is_not():
    """The demo on a busy machine printed SpS 0.57× [0.33, 0.94] with no mark although the run logged itself
    as busy: a time taken under load is now flagged (kept, with its reason) wherever it is read."""
    from cactus_bench import metrics

    def samples(load):
        conditions = {"host": "h", "device": "cpu", "threads": 1, "batch_size": 1, "load": load}
        return [
            {
                "id": i,
                "stats": {"wall_time": 1.0 + i / 10, "paired_method_time": 1.0, "paired_baseline_time": 1.2},
                "timing_conditions": conditions,
                "conditions": conditions,
            }
            for i in range(6)
        ]

    busy = metrics.read("paired_speedup", samples(3.0))
    assert busy.value is not None and "timed on a busy machine (load above 1 per core" in busy.caveat
    assert metrics.read("paired_speedup", samples(0.4)).caveat is None  # control: quiet
    task = metrics.read("speedup", samples(3.0), {"baseline": samples(3.0), "sps": None})
    assert task.value is not None and "busy machine" in task.caveat

"""The intervals behind every comparison the tables print (docs/statistics.md): each formula against a case
worked by hand, and each interval's coverage in seeded simulations, with a negative control that a wrong
formula fails."""

import math
import random

import pytest

from cactus_bench.core import intervals, metrics

EXACT_T95 = {5: 2.570581836, 10: 2.228138852, 30: 2.042272456, 199: 1.971956544}


def test_t_quantiles():
    assert intervals.t95(3) == pytest.approx(3.182446305, abs=1e-9)
    for df, exact in EXACT_T95.items():
        assert intervals.t95(df) == pytest.approx(exact, rel=1.2e-3 if df == 5 else 1e-4)


def test_paired_difference_by_hand():
    """d = 100 on 3 of 10 items, 0 on 7: mean 30, sample deviation sqrt((3·70² + 7·30²)/9) = 48.305, standard
    error 15.275, half-width t(9) · 15.275 = 34.555. Items only one run scored are left out."""
    method = [{"id": i, "score": 100 if i < 3 else 50} for i in range(10)] + [{"id": 99, "score": 0}]
    ref = [{"id": i, "score": 0 if i < 3 else 50} for i in range(10)]
    est = intervals.paired_difference(method, ref)
    assert est.items == 10 and est.value == 30
    half = intervals.t95(9) * math.sqrt((3 * 70**2 + 7 * 30**2) / 9) / math.sqrt(10)
    assert (est.low, est.high) == pytest.approx((30 - half, 30 + half))


def test_an_interval_stays_in_the_range_its_quantity_can_take_and_none_is_given_on_too_few_items():
    """On 3 items a Δ score read +33.33 [-110.09, +176.76] and an acceptance rate [-0.148, 0.828]: a score
    difference lies within ±100 points and a rate within [0, 1], and below MIN_ITEMS items no interval holds
    its coverage, so none is given (the value is)."""
    d = [{"id": i, "score": 100} for i in range(9)] + [{"id": 9, "score": 0}]
    est = intervals.paired_difference(d, [{"id": i, "score": 0} for i in range(10)])
    assert est.value == 90 and est.high == 100 and 60 < est.low < 90  # t's upper end, 112.6, cut at 100
    three = intervals.paired_difference(d[:3], [{"id": i, "score": 0} for i in range(3)])
    assert three.value == 100 and three.low is None and three.high is None and three.items == 3
    rate = intervals.ratio_interval([(4, 4)] * 11 + [(2, 4)], bounds=(0.0, 1.0))
    assert rate.high == 1.0 and rate.low < rate.value < 1.0
    assert metrics.flatten("score_delta", three) == {"score_delta": 100, "score_delta_ci": None, "score_delta_n": 3}


def test_ratio_interval_by_hand():
    """Fieller's interval where the denominators are all alike (b = 2) is the t interval of a / 2: a = 0..9,
    mean 4.5, sample deviation sqrt(82.5 / 9), half-width t(9) · 0.957427 = 2.165858 on a, so R = 2.25 ±
    1.082929. With unequal denominators it leans the way the ratio is skewed (not symmetric about R)."""
    est = intervals.ratio_interval([(a, 2) for a in range(10)])
    half = intervals.t95(9) * math.sqrt(82.5 / 9) / math.sqrt(10) / 2
    assert est.value == 2.25 and (est.low, est.high) == pytest.approx((2.25 - half, 2.25 + half))
    skew = intervals.ratio_interval([(b / 2 + (b % 3), b) for b in (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)])
    assert skew.high - skew.value > 1.1 * (skew.value - skew.low)


def test_rej_by_hand():
    """Rej = 100 · (r / r_SpS − 1), r = Σ rejected / Σ emitted over the items both runs decoded; its interval
    is the jackknife over items on log(r / r_SpS) with t(n − 1), mapped to %."""
    run = [{"id": i, "stats": {"rejected": 2 + i % 3, "new_tokens": 10}} for i in range(12)]
    sps = [{"id": i, "stats": {"rejected": 4, "new_tokens": 10 + i % 2}} for i in range(12)]
    est = metrics.rej(run, sps)
    a, b, c, d = sum(2 + i % 3 for i in range(12)), 120, 48, sum(10 + i % 2 for i in range(12))
    ratio = (a / b) / (c / d)
    assert est.value == pytest.approx(100 * (ratio - 1)) and est.items == 12
    left_out = [math.log(((a - 2 - i % 3) / (b - 10)) / ((c - 4) / (d - 10 - i % 2))) for i in range(12)]
    mean = sum(left_out) / 12
    half = intervals.t95(11) * math.sqrt(11 / 12 * sum((x - mean) ** 2 for x in left_out))
    want = (100 * (ratio * math.exp(-half) - 1), 100 * (ratio * math.exp(half) - 1))
    assert (est.low, est.high) == pytest.approx(want)


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


COVERAGE_SIZES = (20, 40, 200)


def coverage(interval, draw, truth, n, reps=1000, seed=0) -> float:
    """Percent of `reps` simulated runs of n items whose interval (`interval(items)` -> (low, high)) holds
    `truth`; `draw(rng, n)` simulates one run's items."""
    import numpy as np

    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        low, high = interval(draw(rng, n))
        hits += low <= truth <= high
    return 100.0 * hits / reps


def delta_method(pairs):
    """The interval this project printed before: R ± t(n−1) · se, se by the delta method clustered by item
    (symmetric about R: what fails at small n when items differ in length)."""
    n, den = len(pairs), sum(b for _, b in pairs)
    r = sum(a for a, _ in pairs) / den
    half = intervals.t95(n - 1) * math.sqrt(n / (n - 1) * sum((a - r * b) ** 2 for a, b in pairs)) / den
    return r - half, r + half


def test_every_interval_keeps_its_coverage_at_20_40_and_200_items_and_the_old_ratio_interval_did_not():
    """Seeded simulations over items as unlike as real ones (each item's acceptance from Beta(2, 2), the
    U-shaped Beta(0.5, 0.5) or Beta(5, 2); its length log-normal: a few items hold most rounds), for each
    interval a table prints:
    AL (and τ, acceptance: the same ratio interval, within their bounds), Rej, the paired Δ score and the
    paired speedup. Each covers the population value in 95 % ± 2.5 points of 1,000 runs at 20, 40 and 200
    items. The control: the delta-method interval used before covers 88 % at 20 such items."""
    from ..helpers import coverage_models as models

    checks = {
        "AL, Beta(2,2)": (lambda p: intervals.ratio_interval(p), models.al(2, 2)),
        "AL, Beta(0.5,0.5)": (lambda p: intervals.ratio_interval(p), models.al(0.5, 0.5, sigma=0.75)),
        "AL, Beta(5,2), m=10": (lambda p: intervals.ratio_interval(p), models.al(5, 2, m=10)),
        "acceptance": (lambda p: intervals.ratio_interval(p, (0.0, 1.0)), models.acceptance(2, 2)),
        "Rej": (lambda x: metrics.rej(*x), models.rej(2, 2)),
        "Δ score": (lambda x: intervals.paired_difference(*x), models.score_difference(2, 2)),
        "paired speedup": (lambda x: metrics.paired_speedup(x), models.paired_times()),
    }
    for name, (interval, (draw, truth)) in checks.items():
        for n in COVERAGE_SIZES:
            est = lambda items: interval(items)[1:3]  # noqa: E731  (low, high)
            got = coverage(est, draw, truth, n, seed=n)
            assert 92.5 <= got <= 97.5, (name, n, got)
    draw, truth = models.al(2, 2)
    assert coverage(delta_method, draw, truth, 20, seed=20) < 92.5  # the control: the old interval fails here


def test_summaries_carry_intervals_for_every_rate():
    rows = [
        {"accepted": 3, "accepted_any": 4, "drafted": 8, "verifier_calls": 2, "new_tokens": 5, "rejected": 5},
        {"accepted": 6, "accepted_any": 6, "drafted": 8, "verifier_calls": 2, "new_tokens": 8, "rejected": 2},
        {"accepted": 1, "accepted_any": 3, "drafted": 8, "verifier_calls": 2, "new_tokens": 3, "rejected": 7},
    ]
    samples = [{"id": i, "stats": {**dict.fromkeys(metrics.COUNTERS, 0), **rows[i % 3]}} for i in range(12)]
    out = metrics.decode_metrics(samples)
    for name in ("accepted_length", "tau", "acceptance_rate", "prefix_acceptance", "rejected_per_token"):
        low, high = out[f"{name}_ci"]
        assert low < out[name] < high, name
    assert out["tau_ci"][0] >= 1 and out["acceptance_rate_ci"][1] <= 1  # each within what it can be
    assert "target_kl_ci" not in out  # no KL counted: no figure, no interval
    assert "accepted_length_ci" not in metrics.decode_metrics(samples[:9])  # too few items for one


def test_the_detectable_difference_by_hand_and_in_the_plan():
    """(z_0.975 + z_0.8) · sd / sqrt(n): sd 50 over 100 items gives 14.01 points. The plan states it per cell
    at the paper's item counts: with no stored runs, assumed independent decodes at accuracy 0.5 (sd 70.7):
    5.45 points for GSM8K's 1,319 items, 14.08 for GPQA Diamond's 198."""
    from cactus_bench.tools.plan import main

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
    from cactus_bench.tools.report.tables import below_detectable

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
    from cactus_bench.core import metrics

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

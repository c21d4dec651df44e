"""The matched-acceptance reading of relaxed rules (tools/report/matched.py): curves start at SpS, are read
linearly in AL between grid points, never extrapolated, and their interpolated intervals cover the exact
paired interval of the interpolated difference."""

import random

import pandas as pd
import pytest

from cactus_bench.core import intervals
from cactus_bench.tools.report.matched import al_within, at, curves, matched_table

SPEC = {
    "rows": [
        {"label": "Verifier", "method": "ar"},
        {"label": "SpS", "method": "sps"},
        {"label": "R a=1", "method": "r", "a": 1, "curve": "R", "curve_param": "a"},
        {"label": "R a=2", "method": "r", "a": 2, "curve": "R", "curve_param": "a"},
        {"label": "Gone", "method": "r", "a": 3},
    ],
    "matched": {"accepted_length": [2.5, 3.0, 9.0], "score_budget": 2.0},
}


def long_table(points: dict) -> pd.DataFrame:
    """build_table's long form for one dataset: label -> {metric: (value, ci)}."""
    records = [
        {"data": "arith", "label": label, "metric": metric, "ours": value, "ci": ci}
        for label, metrics in points.items()
        for metric, (value, ci) in metrics.items()
    ]
    return pd.DataFrame.from_records(records)


DF = long_table(
    {
        "Verifier": {"score_delta": (None, None), "accepted_length": (None, None)},
        "SpS": {"accepted_length": (2.0, None), "score_delta": (0.5, (-1.5, 2.5)), "output_kl": (0.0, None)},
        "R a=2": {"accepted_length": (4.0, None), "score_delta": (-5.0, (-8.0, -2.0)), "output_kl": (0.2, None)},
        "R a=1": {"accepted_length": (3.0, None), "score_delta": (-1.0, (-3.0, 1.0)), "output_kl": (0.1, None)},
    }
)


def test_a_rules_curve_starts_at_sps_and_runs_in_al_order():
    found = curves(SPEC, DF, "arith")
    assert list(found) == ["R"]  # a row without a run draws no curve
    assert [p["label"] for p in found["R"]] == ["SpS", "R a=1", "R a=2"]


def test_a_curve_is_read_linearly_between_its_points_and_never_beyond():
    curve = curves(SPEC, DF, "arith")["R"]
    assert at(curve, 2.5, "score_delta") == pytest.approx((-0.25, -2.25, 1.75))
    assert at(curve, 3.5, "output_kl")[0] == pytest.approx(0.15)
    assert at(curve, 3.0, "score_delta") == pytest.approx((-1.0, -3.0, 1.0))
    assert at(curve, 4.5, "score_delta") is None and at(curve, 1.0, "score_delta") is None


def test_the_al_within_a_score_budget_is_the_last_crossing():
    curve = curves(SPEC, DF, "arith")["R"]
    assert al_within(curve, 2.0) == pytest.approx(3.25)  # Δ −1 at AL 3, −5 at AL 4: −2 a quarter of the way
    assert al_within(curve, 2.0, end=1) == pytest.approx(2 + 0.5 / 1.5)  # low ends −1.5, −3: between SpS and a=1
    assert al_within(curve, 2.0, end=2) == 4.0  # every high end is within the budget
    assert al_within(curve, 0.1) == pytest.approx(2.4)
    assert al_within([{"al": 2.0, "score_delta": (-3.0, -5.0, -1.0)}], 2.0) is None


def test_a_kl_is_not_read_between_a_finite_and_an_infinite_point():
    curve = [
        {"al": 2.0, "output_kl": (0.1, None, None)},
        {"al": 3.0, "output_kl": (float("inf"), None, None)},
        {"al": 4.0, "output_kl": (float("inf"), None, None)},
    ]
    assert at(curve, 2.5, "output_kl")[0] is None and at(curve, 3.5, "output_kl")[0] == float("inf")


def test_the_table_says_where_a_curve_does_not_reach_an_al():
    table, budget, notes = matched_table(SPEC, DF)
    assert list(table["AL"]) == [2.5, 3.0, 9.0]
    assert pd.isna(table["score_delta"].iloc[2]) and any("does not reach AL 9" in n for n in notes)
    assert budget["AL"].iloc[0] == pytest.approx(3.25)


def test_the_interpolated_interval_covers_the_exact_paired_interval_of_the_interpolated_difference():
    """The claim the table's note makes, on per-item differences of two correlated grid points: reading both
    points' paired t intervals linearly gives an interval at least as wide as the exact one of the weighted
    per-item difference (the SD of a sum is at most the sum of the SDs). Control: the narrowest of the two
    points' own intervals does not cover it."""
    rng = random.Random(3)
    worst_gap = None
    for _ in range(50):
        base = [rng.gauss(0, 20) for _ in range(40)]
        d1 = [b + rng.gauss(0, 10) for b in base]
        d2 = [0.6 * b + rng.gauss(-4, 25) for b in base]
        e1, e2 = intervals.mean_interval(d1), intervals.mean_interval(d2)
        curve = [
            {"al": 2.0, "score_delta": (e1.value, e1.low, e1.high)},
            {"al": 3.0, "score_delta": (e2.value, e2.low, e2.high)},
        ]
        w = rng.random()
        value, low, high = at(curve, 2.0 + w, "score_delta")
        exact = intervals.mean_interval([(1 - w) * a + w * b for a, b in zip(d1, d2)])
        assert value == pytest.approx(exact.value)
        assert low <= exact.low + 1e-9 and high >= exact.high - 1e-9
        gap = min(e1.high - e1.low, e2.high - e2.low) - (exact.high - exact.low)
        worst_gap = gap if worst_gap is None else min(worst_gap, gap)
    assert worst_gap < 0  # control: some exact interval is wider than the narrower point's own

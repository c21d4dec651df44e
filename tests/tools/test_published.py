"""The cost model held against published GPU measurements (`tools/published.py`): docs/gpu.md shows exactly
what the model predicts for every point (a cost-model change shows there, or this fails), the fitted host time
reproduces its own point, the points it was not fitted on stay within their error, and the schedule and law
that carry a source's acceptance to its drafts per round are right."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cactus_bench.tools import published
from cactus_bench.tools.plan import iid_accepted, iid_alpha

ROOT = Path(__file__).resolve().parents[2]


def test_docs_hold_the_tables_predictions():
    doc = (ROOT / "docs" / "gpu.md").read_text()
    shown = doc.split("<!-- published-table: start -->\n")[1].split("<!-- published-table: end -->")[0]
    assert shown == published.table(), "docs/gpu.md's table is stale: paste `python -m cactus_bench.tools.published`"


def test_every_point_cites_its_source_and_states_its_acceptance():
    engines, points = published.load()
    assert len(points) >= 5 and {p.engine for p in points} == set(engines)
    for p in points:
        assert p.reference and p.cite and p.speedup > 1 and (p.tau is not None) != (p.al_at_20 is not None)
    assert any(p.id == "cactus-figure3-gpqa" and p.gpu == "a100-40gb" and p.m == 10 for p in points)


def test_host_time_fits_its_point_and_predicts_the_others():
    """Forwards alone predict every point high; with each engine's host time its fitted point is exact and
    every other point lies within 15 % (docs/gpu.md states the range)."""
    engines, points = published.load()
    err = published.errors()
    assert all(bare > 0 for bare, _ in err.values())
    for p in points:
        if p.id == engines[p.engine].fitted_on:
            assert err[p.id][1] == pytest.approx(0.0, abs=1e-6)
        else:
            assert abs(err[p.id][1]) < 0.15, (p.id, err[p.id])
    assert 0 < published.host_time("transformers-assisted") < published.host_time("vllm-0.7.3-v0") < 0.02


def test_transformers_heuristic_schedule_matches_a_simulation():
    """The schedule's stationary law, against 100,000 simulated rounds at the same acceptance; and its ends:
    nothing accepted keeps one draft, everything accepted climbs to the cap."""
    alpha = 0.65
    rng, m, accepted, drafted, rounds = random.Random(0), published.HF_SCHEDULE_START, 0, 0, 100_000
    for _ in range(rounds):
        n = 0
        while n < m and rng.random() < alpha:
            n += 1
        accepted, drafted = accepted + n, drafted + m
        m = min(m + 2, published.HF_SCHEDULE_CAP) if n == m else max(m - 1, 1)
    exact = published.heuristic_schedule(alpha)
    assert exact[0] == pytest.approx(accepted / rounds, rel=0.02) and exact[1] == pytest.approx(
        drafted / rounds, rel=0.02
    )
    assert published.heuristic_schedule(0.0) == pytest.approx((0.0, 1.0))
    assert published.heuristic_schedule(0.9999)[1] > published.HF_SCHEDULE_CAP - 3


def test_a_stated_m20_acceptance_is_carried_by_the_iid_law():
    alpha = iid_alpha(6.74, 20)
    assert iid_accepted(alpha, 20) == pytest.approx(6.74)
    point = next(p for p in published.load()[1] if p.al_at_20 is not None)
    tau, drafts = published.acceptance(point)
    assert drafts == point.m and tau == pytest.approx(1 + iid_accepted(alpha, point.m))

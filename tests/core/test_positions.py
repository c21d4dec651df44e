"""Acceptance per draft position (core/metrics/positions.py): the identities that tie it to AL and to the
rounds, pooling over items of unequal length, and the two ALs (Σ rounds, item mean) each by hand."""

import random

import pytest

from cactus_bench.core import metrics
from cactus_bench.core.decode.stats import GenerationOutput, Rounds, position_counts


def rounds_of(pairs) -> Rounds:
    r = Rounds()
    for drafted, accepted in pairs:
        zero = dict.fromkeys(("t_draft", "t_verify", "t_rule", "t_other", "kl_sum", "out_kl_sum"), 0.0)
        counts = dict.fromkeys(("kl_count", "out_kl_count", "out_kl_skipped"), 0)
        r.add(drafted=drafted, accepted=accepted, accepted_any=accepted, emitted=accepted + 1, **zero, **counts)
    return r


def random_item(rng: random.Random, m: int, cut: bool) -> list[tuple[int, int]]:
    """Rounds of one item: m drafts each (or, with `cut`, fewer at random: a budget or EOS), accepted by a
    position-dependent chance."""
    out = []
    for _ in range(rng.randint(1, 30)):
        drafted = rng.randint(0, m) if cut and rng.random() < 0.3 else m
        accepted = 0
        while accepted < drafted and rng.random() < 0.9 - 0.1 * accepted:
            accepted += 1
        out.append((drafted, accepted))
    return out


def sample_of(i, pairs):
    return {
        "id": i,
        "stats": GenerationOutput([0] * sum(a + 1 for _, a in pairs), rounds_of(pairs), 0.0, 1.0, "eos").summary(),
    }


def test_counts_by_hand():
    """Rounds (drafted, accepted) = (4, 4), (4, 0), (4, 2), (2, 2), (0, 0): exactly k accepted for k = 0..4 is
    2, 0, 2, 0, 1 rounds; draft 1 was tested in the 4 rounds that drafted, draft 2 in the 3 that accepted
    draft 1 and drafted a second, draft 3 in 2 ((2, 2) drafted no third), draft 4 in 1."""
    c = position_counts([4, 4, 4, 2, 0], [4, 0, 2, 2, 0])
    assert c == {"accepted_hist": [2, 0, 2, 0, 1], "tested_at": [4, 3, 2, 1]}
    s = sample_of(0, [(4, 4), (4, 0), (4, 2), (2, 2), (0, 0)])["stats"]
    assert s["acceptance_at"] == [3 / 4, 3 / 3, 1 / 2, 1 / 1]
    assert s["accepted_at_least"] == [3 / 5, 3 / 5, 1 / 5, 1 / 5] and s["accept_none_share"] == 2 / 5
    assert position_counts([0, 0], [0, 0]) == {"accepted_hist": None, "tested_at": None}  # the verifier alone


@pytest.mark.parametrize("cut", [False, True])
def test_identities_hold_on_every_run(cut):
    """Over seeded random runs: the histogram sums to the verifier calls; Σ_j P(≥ j accepted) is AL (Σ
    rounds) exactly; and where no round is cut short, P(≥ j) is the product of the conditional acceptances
    at 1..j (the chain rule: each conditional is counted among the rounds that reached it)."""
    rng = random.Random(7)
    for _ in range(20):
        m = rng.randint(1, 8)
        samples = [sample_of(i, random_item(rng, m, cut)) for i in range(rng.randint(1, 12))]
        s = metrics.decode_metrics(samples)
        pooled = metrics.pool(samples)
        assert sum(pooled["accepted_hist"]) == s["verifier_calls"]
        assert sum(x for x in s["accepted_at_least"] if x) == pytest.approx(s["accepted_length"], abs=1e-12)
        assert sum(k * n for k, n in enumerate(pooled["accepted_hist"])) == pooled["accepted"]
        assert sum(s["accepted_histogram"]) == pytest.approx(1.0)
        if not cut:
            product = 1.0
            for j, conditional in enumerate(s["acceptance_at"]):
                product *= conditional or 0.0
                assert s["accepted_at_least"][j] == pytest.approx(product, abs=1e-12)


def test_pooling_items_equals_counting_their_rounds_together():
    """Items of other lengths (and so of other list lengths) pool position by position: the run's figures are
    those of all its rounds counted as one item's."""
    rng = random.Random(3)
    items = [random_item(rng, m, cut=True) for m in (2, 5, 3, 5)]
    pooled = metrics.decode_metrics([sample_of(i, p) for i, p in enumerate(items)])
    together = sample_of(0, [r for p in items for r in p])["stats"]
    for name in ("acceptance_at", "accepted_at_least", "accepted_histogram", "accept_none_share"):
        assert pooled[name] == pytest.approx(together[name]), name


def test_the_two_als_by_hand_and_their_intervals():
    """A long item with AL 4 (10 rounds) and a short one with AL 0 (2 rounds), 6 of each: AL (Σ rounds) =
    Σ accepted / Σ calls = 240 / 72 = 3.33; AL (item mean) = the mean of 4 and 0 = 2, with a t interval
    over the 12 items; each position's interval is clustered by item and holds its value."""
    long, short = [(4, 4)] * 10, [(4, 0)] * 2
    samples = [sample_of(i, long if i % 2 else short) for i in range(12)]
    s = metrics.decode_metrics(samples)
    assert s["accepted_length"] == pytest.approx(240 / 72) and s["item_accepted_length"] == pytest.approx(2.0)
    low, high = s["item_accepted_length_ci"]
    assert low < 2.0 < high and low > 0
    assert s["acceptance_at"] == pytest.approx([60 / 72, 1.0, 1.0, 1.0])
    (lo, hi), *_ = s["acceptance_at_ci"]
    assert lo < 60 / 72 < hi
    assert metrics.METRICS.get("accepted_length").label != metrics.METRICS.get("item_accepted_length").label


def test_a_positional_metric_is_a_table_column_set():
    """A spec asks for `acceptance_at` and gets one column per draft position, each read as its metric's."""
    assert metrics.expand_columns(["score", "acceptance_at", "accepted_histogram"], 3) == [
        "score", "acceptance_at_1", "acceptance_at_2", "acceptance_at_3",
        "accepted_histogram_0", "accepted_histogram_1", "accepted_histogram_2", "accepted_histogram_3",
    ]  # fmt: skip
    metric, position = metrics.column_metric("acceptance_at_2")
    assert metric.name == "acceptance_at" and position == 2
    assert metrics.column_metric("score") == (metrics.METRICS.get("score"), None)
    assert metrics.column_metric("tau_2") is None  # not a positional metric
    summary = {"acceptance_at": [0.9, 0.5], "acceptance_at_ci": [[0.8, 1.0], None]}
    assert metrics.position_entries(metrics.METRICS.get("acceptance_at"), summary) == {
        "acceptance_at_1": 0.9, "acceptance_at_1_ci": [0.8, 1.0], "acceptance_at_2": 0.5, "acceptance_at_2_ci": None,
    }  # fmt: skip

"""The intervals behind every comparison (docs/statistics.md): 95 % intervals over items, the unit of a
benchmark (an item's rounds are not independent of each other). Plain Python, no dependencies."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import NamedTuple


class Estimate(NamedTuple):
    value: float
    low: float  # 95 % interval over items (bootstrap, delta method or t, as the metric says)
    high: float
    items: int


Z95 = 1.959963984540054  # the standard normal's 97.5 % point
Z80 = 0.8416212335729143  # its 80 % point: the power a plan asks for


def detectable_difference(sd: float, n: int) -> float | None:
    """The smallest true mean difference a paired comparison of n items detects with 80 % power at α = 0.05
    (two-sided), given the per-item differences' standard deviation: (z_0.975 + z_0.8) · sd / sqrt(n)."""
    return (Z95 + Z80) * sd / math.sqrt(n) if n > 0 and sd is not None else None


def difference_sd(estimate: Estimate) -> float:
    """The per-item differences' standard deviation behind a `mean_interval` (from its half-width)."""
    return (estimate.high - estimate.value) / t95(estimate.items - 1) * math.sqrt(estimate.items)


T95_SMALL = {1: 12.706204736174705, 2: 4.302652729749464, 3: 3.182446305284263, 4: 2.7764451051977987}


def t95(df: int) -> float:
    """Student's t 97.5 % point for `df` degrees of freedom: exact up to 4, then the Cornish-Fisher expansion
    about the normal's (within 0.11 % of the exact value at 5, 0.01 % from 10 on)."""
    if df in T95_SMALL:
        return T95_SMALL[df]
    z = Z95
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean_interval(values: list[float]) -> Estimate | None:
    """The mean of per-item values with a 95 % t interval (standard error: sample deviation / sqrt n)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    se = (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5
    half = t95(n - 1) * se
    return Estimate(mean, mean - half, mean + half, n)


def ratio_interval(pairs: list[tuple[float, float]]) -> Estimate | None:
    """R = Σ a_i / Σ b_i over items i with its 95 % interval by the delta method, clustered by item (each
    item's rounds are one cluster: rounds of one item are not independent): var R ≈ n/(n−1) · Σ (a_i − R b_i)²
    / (Σ b_i)², and R ± t(n−1) · sqrt(var R)."""
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    n, den = len(pairs), sum(b for _, b in pairs)
    if n < 2 or not den:
        return None
    r = sum(a for a, _ in pairs) / den
    se = (n / (n - 1) * sum((a - r * b) ** 2 for a, b in pairs)) ** 0.5 / den
    half = t95(n - 1) * se
    return Estimate(r, r - half, r + half, n)


def paired_difference(samples: list[dict], reference: list[dict]) -> Estimate | None:
    """Mean per-item score difference (this run − the reference run) over the items both scored, with its
    95 % t interval: each item is its own pair, so the items' own difficulty cancels (an unpaired comparison
    of two means carries it twice)."""
    ref = {s["id"]: s.get("score") for s in reference}
    diffs = [s["score"] - ref[s["id"]] for s in samples if s.get("score") is not None and ref.get(s["id"]) is not None]
    return mean_interval(diffs)


def bootstrap(
    items: list, statistic: Callable[[list], float | None], value: float, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """`value` with a percentile-bootstrap 95 % interval: `statistic` over `resamples` draws of the items with
    replacement (seeded: the same items give the same interval; a draw whose statistic is None is skipped)."""
    rng, n, stats = random.Random(seed), len(items), []
    for _ in range(resamples):
        v = statistic([items[rng.randrange(n)] for _ in range(n)])
        if v is not None:
            stats.append(v)
    stats.sort()
    return Estimate(value, stats[int(0.025 * len(stats))], stats[int(0.975 * len(stats)) - 1], n)


def ratio_of_sums(pairs: list[tuple[float, float]], resamples: int = 2000, seed: int = 0) -> Estimate | None:
    """Σ numerator / Σ denominator over items, with a percentile-bootstrap 95 % interval that resamples
    items."""
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    den = sum(b for _, b in pairs)
    if not pairs or not den:
        return None

    def ratio(draw):
        d = sum(b for _, b in draw)
        return sum(a for a, _ in draw) / d if d else None

    return bootstrap(pairs, ratio, sum(a for a, _ in pairs) / den, resamples, seed)

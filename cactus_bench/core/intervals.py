"""The intervals behind every comparison (docs/statistics.md): 95 % intervals over items, the unit of a
benchmark (an item's rounds are not independent of each other). Plain Python, no dependencies."""

from __future__ import annotations

import math
from typing import NamedTuple


class Estimate(NamedTuple):
    value: float
    low: float | None  # 95 % interval over items (Fieller, delta method or t, as the metric says); None
    high: float | None  # below MIN_ITEMS items, where none of them holds its coverage
    items: int


# Below this many items no interval is given: checked by simulation (tests/core/test_statistics.py), every interval
# here covers 95 % ± 2.5 points from 20 items on, over items as unlike as real ones (heavy-tailed lengths,
# per-item acceptance from Beta(2, 2) or Beta(0.5, 0.5)); at 10 items Fieller's is still within 93-97 %.
MIN_ITEMS = 10


Z95 = 1.959963984540054  # the standard normal's 97.5 % point
Z80 = 0.8416212335729143  # its 80 % point: the power a plan asks for


def detectable_difference(sd: float, n: int) -> float | None:
    """The smallest true mean difference a paired comparison of n items detects with 80 % power at α = 0.05
    (two-sided), given the per-item differences' standard deviation: (z_0.975 + z_0.8) · sd / sqrt(n)."""
    return (Z95 + Z80) * sd / math.sqrt(n) if n > 0 and sd is not None else None


def difference_sd(estimate: Estimate) -> float | None:
    """The per-item differences' standard deviation behind a `mean_interval` (from its half-width)."""
    if estimate.high is None:
        return None
    return (estimate.high - estimate.value) / t95(estimate.items - 1) * math.sqrt(estimate.items)


def bounded(value: float, low: float, high: float, items: int, bounds: tuple[float, float]) -> Estimate:
    """An estimate whose interval is cut to the range the quantity can take (the truth lies in it, so
    cutting never loses coverage), or given none below MIN_ITEMS items."""
    if items < MIN_ITEMS:
        return Estimate(value, None, None, items)
    return Estimate(value, max(low, bounds[0]), min(high, bounds[1]), items)


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


def mean_interval(values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf)) -> Estimate | None:
    """The mean of per-item values with a 95 % t interval (standard error: sample deviation / sqrt n), cut
    to `bounds`."""
    n = len(values)
    if n == 0:
        return None
    mean = sum(values) / n
    if n < MIN_ITEMS:
        return Estimate(mean, None, None, n)
    se = (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5
    half = t95(n - 1) * se
    return bounded(mean, mean - half, mean + half, n, bounds)


def ratio_interval(pairs: list[tuple[float, float]], bounds: tuple[float, float] = (0.0, math.inf)) -> Estimate | None:
    """R = Σ a_i / Σ b_i over items i (each item one cluster: its rounds are not independent) with Fieller's
    95 % interval: the R for which ā − R·b̄ is within t(n−1) standard errors of 0,

        (ā − R b̄)² ≤ t² (s_aa − 2R s_ab + R² s_bb) / n,

    solved for R (s: the items' sample (co)variances). It keeps its coverage where the delta method's
    R ± t·se does not: few items of very unequal length (88 % at 20 items of log-normal length, Fieller's
    95 %), because it lets the interval lean the way the ratio is skewed. When b̄ is not clear of 0 (a few
    items hold nearly all of it) the items cannot bound R: the interval is all of `bounds`. No interval below
    MIN_ITEMS items."""
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    n, den = len(pairs), sum(b for _, b in pairs)
    if not den:
        return None
    r = sum(a for a, _ in pairs) / den
    if n < MIN_ITEMS:
        return Estimate(r, None, None, n)
    ma, mb = sum(a for a, _ in pairs) / n, den / n
    saa = sum((a - ma) ** 2 for a, _ in pairs) / (n - 1) / n
    sbb = sum((b - mb) ** 2 for _, b in pairs) / (n - 1) / n
    sab = sum((a - ma) * (b - mb) for a, b in pairs) / (n - 1) / n
    t2 = t95(n - 1) ** 2
    qa, qb, qc = mb * mb - t2 * sbb, -2 * (ma * mb - t2 * sab), ma * ma - t2 * saa
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return bounded(r, -math.inf, math.inf, n, bounds)
    root = math.sqrt(disc)
    return bounded(r, (-qb - root) / (2 * qa), (-qb + root) / (2 * qa), n, bounds)


def ratio_of_ratios(items: list[tuple[float, float, float, float]]) -> Estimate | None:
    """(Σa/Σb) / (Σc/Σd) over items that two runs decoded (a, b from one run, c, d from the other), with a
    95 % interval from the jackknife on its logarithm (each item left out in turn: the item is the unit)
    with t(n − 1). On the log scale the interval leans as the ratio does and stays positive; the jackknife
    kept 93-96 % coverage at 20 items where the delta method's fell to 91 %. None when a sum is 0 (or an
    item holds all of one); no interval below MIN_ITEMS items."""
    n = len(items)
    sums = [sum(x[k] for x in items) for k in range(4)]
    if not all(sums):
        return None
    value = (sums[0] / sums[1]) / (sums[2] / sums[3])
    if n < MIN_ITEMS:
        return Estimate(value, None, None, n)
    rest = [[sums[k] - x[k] for k in range(4)] for x in items]
    if any(r[k] <= 0 for r in rest for k in range(4)):
        return None
    logs = [math.log((r[0] / r[1]) / (r[2] / r[3])) for r in rest]
    mean = sum(logs) / n
    half = t95(n - 1) * math.sqrt((n - 1) / n * sum((x - mean) ** 2 for x in logs))
    return Estimate(value, value * math.exp(-half), value * math.exp(half), n)


def paired_difference(samples: list[dict], reference: list[dict]) -> Estimate | None:
    """Mean per-item score difference (this run − the reference run) over the items both scored, with its
    95 % t interval, cut to the ±100 points a difference of scores can be: each item is its own pair, so
    the items' own difficulty cancels (an unpaired comparison of two means carries it twice)."""
    ref = {s["id"]: s.get("score") for s in reference}
    diffs = [s["score"] - ref[s["id"]] for s in samples if s.get("score") is not None and ref.get(s["id"]) is not None]
    return mean_interval(diffs, (-100.0, 100.0))

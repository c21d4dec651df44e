"""Populations of items for the coverage tests (test_statistics.py): each model returns `(draw, truth)`,
`draw(rng, n)` one simulated run's n items in the form the interval reads, `truth` the population value the
interval must cover. Items differ as real ones do: each its own acceptance probability (Beta(α, β)) and its
own length, log-normal (median 20 rounds, a few items hold most of them). An item's length is drawn apart
from its acceptance, so every truth is exact (Beta moments), not itself simulated."""

from math import comb

import numpy as np

LENGTH = (3.0, 1.0)  # log-normal rounds per item: median e^3 = 20, a tenth of the items over 72


def beta_moment(alpha: float, beta: float, j: int) -> float:
    """E[a^j] for a ~ Beta(alpha, beta)."""
    out = 1.0
    for i in range(j):
        out *= (alpha + i) / (alpha + beta + i)
    return out


def accepted_per_round(alpha: float, beta: float, m: int, lift: float = 0.0) -> float:
    """E[accepted drafts in a round] = E[Σ_{j=1..m} a^j], for a = lift + (1 − lift)·a0, a0 ~ Beta."""
    return sum(
        comb(j, k) * lift ** (j - k) * (1 - lift) ** k * beta_moment(alpha, beta, k)
        for j in range(1, m + 1)
        for k in range(j + 1)
    )


def lengths(rng, n: int, sigma: float = LENGTH[1]):
    """Verifier calls per item: log-normal (σ: how heavy its tail), at least one."""
    return np.maximum(1, np.round(rng.lognormal(LENGTH[0], sigma, n))).astype(int)


def rounds(rng, n: int, alpha: float, beta: float, m: int, lift: float = 0.0, calls=None):
    """Per item: (accepted drafts, verifier calls); each round accepts min(G − 1, m) drafts, G geometric with
    the item's rejection probability (drafts accepted one after another until the first rejection)."""
    a = np.minimum(lift + (1 - lift) * rng.beta(alpha, beta, n), 1 - 1e-12)
    if calls is None:
        calls = lengths(rng, n)
    k = np.minimum(rng.geometric(1 - np.repeat(a, calls)) - 1, m)
    starts = np.cumsum(calls) - calls
    return np.add.reduceat(k, starts).astype(float), calls.astype(float)


def al(alpha: float, beta: float, m: int = 4, sigma: float = LENGTH[1]):
    """AL = Σ accepted / Σ calls: its interval reads (accepted, calls) pairs."""

    def draw(rng, n):
        acc, calls = rounds(rng, n, alpha, beta, m, calls=lengths(rng, n, sigma))
        return list(zip(acc.tolist(), calls.tolist()))

    return draw, accepted_per_round(alpha, beta, m)


def acceptance(alpha: float, beta: float, m: int = 4):
    """Prefix acceptance = Σ accepted / Σ drafted (m per call): a rate in [0, 1]."""

    def draw(rng, n):
        acc, calls = rounds(rng, n, alpha, beta, m)
        return list(zip(acc.tolist(), (m * calls).tolist()))

    return draw, accepted_per_round(alpha, beta, m) / m


def rej(alpha: float, beta: float, m: int = 4, lift: float = 0.3):
    """Rej's ratio r / r_SpS, r = Σ rejected / Σ emitted, with SpS at the item's acceptance and the method
    accepting more (a' = lift + (1 − lift)·a), on the same items (their lengths shared); Rej = 100 (· − 1)."""

    def stats(acc, calls):
        return [{"rejected": m * c - a, "new_tokens": a + c} for a, c in zip(acc.tolist(), calls.tolist())]

    def draw(rng, n):
        calls = lengths(rng, n)
        base = stats(*rounds(rng, n, alpha, beta, m, calls=calls))
        method = stats(*rounds(rng, n, alpha, beta, m, lift, calls=calls))
        return [{"id": i, "stats": s} for i, s in enumerate(method)], [
            {"id": i, "stats": s} for i, s in enumerate(base)
        ]

    g, g2 = accepted_per_round(alpha, beta, m), accepted_per_round(alpha, beta, m, lift)
    return draw, 100.0 * (((m - g2) / (1 + g2)) / ((m - g) / (1 + g)) - 1.0)


def score_difference(alpha: float, beta: float, gain: float = 0.1):
    """Per-item scores (0 or 100) of a method solving an item with probability p + gain·(1 − p) against a
    reference solving it with p ~ Beta: Δ = 100 · gain · E[1 − p]."""

    def draw(rng, n):
        p = rng.beta(alpha, beta, n)
        ref = 100.0 * (rng.random(n) < p)
        method = 100.0 * (rng.random(n) < p + gain * (1 - p))
        as_samples = lambda x: [{"id": i, "score": float(v)} for i, v in enumerate(x)]  # noqa: E731
        return as_samples(method), as_samples(ref)

    return draw, 100.0 * gain * beta / (alpha + beta)


def paired_times(alpha: float = 2.0, beta: float = 2.0):
    """Paired timing: an item of log-normal length L takes L·u alone and L·(1/2 + a/2)·v with the method
    (u, v log-normal noise, σ = 0.1; a its acceptance): speedup = E[u] / (E[1/2 + a/2]·E[v])."""

    def draw(rng, n):
        length = rng.lognormal(*LENGTH, n)
        alone = length * rng.lognormal(0, 0.1, n)
        method = length * (0.5 + 0.5 * rng.beta(alpha, beta, n)) * rng.lognormal(0, 0.1, n)
        stats = zip(alone.tolist(), method.tolist())
        return [
            {"id": i, "stats": {"paired_baseline_time": b, "paired_method_time": t}} for i, (b, t) in enumerate(stats)
        ]

    return draw, 1.0 / (0.5 + 0.5 * alpha / (alpha + beta))

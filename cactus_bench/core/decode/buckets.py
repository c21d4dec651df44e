"""Length buckets: the KV capacities a sequence passes through (powers of two and 1.5 times them), so a
compiled forward is traced once per bucket and attention reads at most 1.5x the live keys."""

from __future__ import annotations


def kv_bucket(needed: int, capacity: int | None = None) -> int:
    """The smallest length bucket >= `needed` (64, 96, 128, 192, 256, 384, ..., 4096, 6144, ...: powers of two
    and 1.5 times them), at most `capacity`. Attention over a bucket reads at most 1.5x the live keys, and a
    4,096-token reply after a 1,000-token prompt passes through 6 buckets."""
    j = 0
    while True:
        for base in (64, 96):
            size = base << j
            if size >= needed:
                return size if capacity is None else min(size, capacity)
        j += 1


def buckets_between(lo: int, hi: int) -> list[int]:
    """Every bucket a sequence growing from `lo` to `hi` tokens passes through."""
    out, n = [], max(lo, 1)
    while True:
        b = kv_bucket(n)
        out.append(b)
        if b >= hi:
            return out
        n = b + 1


def capacity_for(needed: int) -> int:
    """Cache positions for sequences up to `needed` tokens: the bucket holding them (so every bucket a
    sequence passes through is a slice of the same tensors)."""
    return kv_bucket(max(needed, 1))

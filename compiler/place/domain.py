"""Domains of legal start addresses as aligned intervals (see instance.py):
a flat sorted list [lo0, hi0, lo1, hi1, ...], half-open, each lo aligned.
Lists are never mutated in place, so a search can restore a domain by keeping
the old list object on its trail."""
from __future__ import annotations

from bisect import bisect_left, bisect_right


def subtract(d: list[int], x: int, y: int, al: int) -> list[int]:
    """Domain d without the starts in [x, y). Returns d itself when unchanged."""
    if x >= y or not d or y <= d[0] or x >= d[-1]:
        return d
    p = bisect_right(d, x)   # boundaries <= x; odd: x inside interval (p-1)//2
    q = bisect_left(d, y)    # boundaries < y;  odd: y inside interval (q-1)//2 (past its lo)
    if p == q and not p & 1:
        return d             # [x, y) lies in a gap
    if p & 1:
        head = d[:p - 1]
        if d[p - 1] < x:     # keep [lo, x): lo itself is aligned, so non-empty
            head += [d[p - 1], x]
    else:
        head = d[:p]
    if q & 1:
        lo = -(-y // al) * al
        if lo < d[q]:
            head += [lo, d[q]]
        return head + d[q + 1:]
    return head + d[q:]


def first_at_or_above(d: list[int], f: int, al: int) -> int:
    """Lowest legal start >= f, or -1."""
    k = bisect_right(d, f)
    if k & 1:
        s = -(-f // al) * al
        if s < d[k]:
            return s
        k += 1
    return d[k] if k < len(d) else -1


def last(d: list[int], al: int) -> int:
    """Highest legal start (d non-empty)."""
    lo, hi = d[-2], d[-1]
    return lo + (hi - 1 - lo) // al * al


def measure(d: list[int]) -> int:
    return sum(d[1::2]) - sum(d[0::2])


def starts(d: list[int], al: int) -> list[int]:
    """Every legal start (tests only: brute-force reference)."""
    out = []
    for k in range(0, len(d), 2):
        out += range(d[k], d[k + 1], al)
    return out

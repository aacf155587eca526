"""Domain arithmetic and first-fit against brute force over every aligned start."""
import random

from compiler.place.domain import first_at_or_above, last, starts, subtract
from compiler.place.greedy import first_fit


def _rand_domain(rng, al):
    d, x = [], rng.randrange(0, 64) * al
    for _ in range(rng.randrange(0, 5)):
        lo = x + rng.randrange(0, 6) * al
        hi = lo + rng.randrange(1, 40)
        d += [lo, hi]
        x = hi + rng.randrange(1, 30)
        x = -(-x // al) * al
    return d


def test_subtract_matches_brute_force():
    rng = random.Random(1)
    for _ in range(3000):
        al = rng.choice([1, 2, 4, 8, 16])
        d = _rand_domain(rng, al)
        x = rng.randrange(-10, 300)
        y = x + rng.randrange(-5, 120)
        nd = subtract(d, x, y, al)
        want = [s for s in starts(d, al) if not (x <= s < y)]
        assert starts(nd, al) == want, (d, x, y, al, nd)
        assert all(nd[k] < nd[k + 1] for k in range(len(nd) - 1))
        assert all(nd[k] % al == 0 for k in range(0, len(nd), 2))
        assert all(nd[k] < nd[k + 1] for k in range(0, len(nd), 2))
        if want:
            assert last(nd, al) == want[-1]
        f = rng.randrange(-5, 300)
        assert first_at_or_above(d, f, al) == next((s for s in starts(d, al) if s >= f), -1)


def test_first_fit_matches_brute_force():
    rng = random.Random(2)
    for _ in range(2000):
        al = rng.choice([1, 4, 8])
        d = _rand_domain(rng, al)
        e = rng.randrange(1, 30)
        blocks = sorted((lo, lo + rng.randrange(1, 40)) for lo in
                        (rng.randrange(0, 300) for _ in range(rng.randrange(0, 8))))
        want = next((s for s in starts(d, al)
                     if all(not (s < hi and lo < s + e) for lo, hi in blocks)), -1)
        assert first_fit(d, al, e, blocks) == want, (d, al, e, blocks)

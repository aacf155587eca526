"""plan/matmul.py reduce_rows: the rows each k-split reducer sums. Brute force, sharing
no code with it: every reducer's slice of every column block's partial starts 8-byte
aligned (ADD's rule, which the simulator enforces), the slices cover the block, and no
smaller row count that covers it is aligned too."""
from __future__ import annotations

import itertools

import numpy as np

from compiler.plan.matmul import reduce_rows


def aligned(rr: int, widths) -> bool:
    return all((rr * w * 2) % 8 == 0 for w in widths)


def test_reduce_rows_is_the_least_aligned_cover():
    for mb, gk, nb, n in itertools.product((1, 2, 7, 9, 82, 92, 146), (2, 3, 6, 10, 23),
                                           (2, 4, 6, 16, 24, 26, 72, 74, 128), (72, 128, 730, 1152)):
        if nb > n:
            continue
        widths = {nb, n - (-(-n // nb) - 1) * nb}
        rr = reduce_rows(mb, gk, nb, n)
        assert rr * gk >= mb and aligned(rr, widths), (mb, gk, nb, n, rr)
        least = next(r for r in range(-(-mb // gk), rr + 1) if aligned(r, widths))
        assert rr == least, (mb, gk, nb, n, rr, least)
        # vectorised as plan's grid enumeration calls it
        v = reduce_rows(np.array([mb, mb]), np.array([gk, gk]), np.array([nb, nb]), n)
        assert v.tolist() == [rr, rr]


def test_the_p_v_reducers_of_so400m():
    """82-row blocks over 10 key splits, 72 columns: 9 rows a reducer (was 10)."""
    assert reduce_rows(82, 10, 72, 72) == 9
    assert reduce_rows(82, 10, 74, 730) == 10      # 74 columns: even rows keep the 8-byte starts

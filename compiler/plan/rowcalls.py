"""policy.row_calls: a row-wise kernel (LayerNorm, softmax) on a tile issued as the row chunks
whose summed cycles are least, instead of one call over all the tile's rows.

Why: PopLibs' by-row vertices give each worker whole rows (BroadcastVectorOuterByRow1D,
compiler/costs/vertices.py: each worker ceil(rows / 6) rows, the supervisor waits for the
busiest), so 2-5 rows leave workers idle, while a single row runs the element-wise
BroadcastScalar1D over all 6 workers (compiler/costs/vector.py by_row_cycles). So400m's
LayerNorm (1152 columns) costs 5,923 cycles for one row and 32,411 for two: a batch of 4
images at 27 layers (2,920 rows over 1,472 tiles) pays the two-row figure on most tiles.

The chunks are chosen by the kernel's own cost function (the target's, what expand and the
simulator charge), by dynamic programming over the row counts: best[j] = min over the last
chunk c of best[j - c] + cost(c). Chunks after the first start at a byte offset of the
block, so a split is allowed only where every chunk's byte size keeps the operands' 8-byte
alignment (isa.OPERANDS): rows x row bytes a multiple of 8."""
from __future__ import annotations

import numpy as np


def best_chunks(rows: int, cost, quantum: int = 1) -> list[int]:
    """Chunk sizes (summing to `rows`, in order) minimising sum(cost(chunk)); every chunk but
    the last a multiple of `quantum` rows. `cost` maps an int64 array of row counts to cycles.
    Ties keep fewer chunks (one call when splitting gains nothing)."""
    if rows <= 1:
        return [rows]
    sizes = np.arange(1, rows + 1, dtype=np.int64)
    c = np.asarray(cost(sizes), np.int64)
    best = np.zeros(rows + 1, np.int64)
    last = np.zeros(rows + 1, np.int64)
    for j in range(1, rows + 1):
        cand = np.arange(1, j + 1)
        ok = (j - cand) % quantum == 0                       # this chunk starts aligned
        tot = np.where(ok, best[j - cand] + c[cand - 1], np.iinfo(np.int64).max)
        i = int(np.argmin(tot[::-1]))                        # the largest last chunk among the least
        last[j] = j - i
        best[j] = tot[j - 1 - i]
    out, j = [], rows
    while j > 0:
        out.append(int(last[j]))
        j -= int(last[j])
    return out[::-1]


def row_quantum(row_bytes: int, align: int = 8) -> int:
    """Rows per chunk that keep a chunk boundary `align`-byte aligned."""
    return align // np.gcd(int(row_bytes), align)


def split_blocks(rows: np.ndarray, cost, quantum: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For blocks of `rows` rows: (block index, first row, rows) of every chunk, blocks in
    order. Blocks with the same row count share one choice."""
    rows = np.asarray(rows, np.int64)
    plans = {int(r): best_chunks(int(r), cost, quantum) for r in np.unique(rows)}
    idx, first, n = [], [], []
    for b, r in enumerate(rows):
        start = 0
        for ch in plans[int(r)]:
            idx.append(b)
            first.append(start)
            n.append(ch)
            start += ch
    return np.asarray(idx, np.int64), np.asarray(first, np.int64), np.asarray(n, np.int64)


def chunked_cycles(rows: np.ndarray, cost, quantum: int) -> np.ndarray:
    """Cycles of each block of `rows` rows issued as its best_chunks (what expand issues):
    the plan's price of a row-wise op under policy.row_calls."""
    rows = np.asarray(rows, np.int64)
    u, inv = np.unique(rows, return_inverse=True)
    per = [int(np.sum(cost(np.asarray(best_chunks(int(r), cost, quantum), np.int64)))) for r in u]
    return np.asarray(per, np.int64)[inv.reshape(rows.shape)]

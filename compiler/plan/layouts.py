"""Layouts as blocks (r0, nr, c0, nc, tile): the geometry the beam search (plan/beam.py)
costs a state's exchanges and kernels with: which rectangles of an operand a matmul reads,
how many of their elements each tile holds, and the busiest tile's cycles."""
from __future__ import annotations

import numpy as np


def groups_of(op) -> np.ndarray:
    return np.asarray(op.attr("groups", ((0,) * 6,)), np.int64)


def rotated(blocks, rot: int, T: int):
    """Blocks of a grid placed from tile `rot` (Grid.rot)."""
    return (*blocks[:4], (blocks[4] + rot) % T) if rot else blocks


def full_rows(blocks) -> bool:
    return len(np.unique(blocks[2])) == 1


def operand_windows(op, which: int) -> np.ndarray:
    """Rectangles (r0, nr, c0, nc) of input `which` (0 = A, 1 = B) the matmul reads,
    one per group, adjacent ones merged."""
    gr = groups_of(op)
    M, K, N = op.attr("m"), op.attr("k"), op.attr("n")
    if which == 0:
        w = [(g[0], M, g[1], K) for g in gr]
    elif op.attr("transpose_b", False):
        w = [(g[2], N, g[3], K) for g in gr]
    else:
        w = [(g[2], K, g[3], N) for g in gr]
    return merge(sorted(set(map(tuple, np.asarray(w).tolist()))))


def merge(rects: list) -> np.ndarray:
    """Merge rectangles sharing rows and adjacent in columns, then the converse."""
    for key in ((0, 1, 2), (2, 3, 0)):          # (shared start, shared extent, running start)
        a, b, s = key
        out = []
        for r in sorted(rects, key=lambda r: (r[a], r[b], r[s])):
            p = out[-1] if out else None
            if p and p[a] == r[a] and p[b] == r[b] and p[s] + p[s + 1] == r[s]:
                out[-1] = tuple(p[k] + r[k] if k == s + 1 else p[k] for k in range(4))
            else:
                out.append(tuple(r))
        rects = out
    return np.asarray(rects, np.int64).reshape(-1, 4)


def overlap(blocks, windows) -> np.ndarray:
    """Elements of each window in each block: [blocks, windows]."""
    r0, nr, c0, nc, _ = blocks
    w = windows
    rows = np.minimum(r0[:, None] + nr[:, None], w[:, 0] + w[:, 1]) - np.maximum(r0[:, None], w[:, 0])
    cols = np.minimum(c0[:, None] + nc[:, None], w[:, 2] + w[:, 3]) - np.maximum(c0[:, None], w[:, 2])
    return np.clip(rows, 0, None) * np.clip(cols, 0, None)


def tile_elems(blocks, windows, T: int) -> np.ndarray:
    """Elements of the windows each tile holds: [T]."""
    return np.bincount(blocks[4], overlap(blocks, windows).sum(1), minlength=T).astype(np.int64)


def word_aligned(blocks, windows, ebytes: int) -> bool:
    """Exchange rows are whole 32-bit words (expand/analysis.py rejects others). The
    consumer's block edges are words by construction (plan/matmul.py), so a gather from
    this layout is encodable iff every block it reads starts and ends on a word: an
    FP8 cast of a matmul output with nb ≡ 2 (mod 4) is not."""
    w = max(1, 4 // ebytes)
    read = overlap(blocks, windows).sum(1) > 0
    c0, nc = blocks[2][read], blocks[3][read]
    return bool(((c0 % w == 0) & ((c0 + nc) % w == 0)).all())


def pareto(rows: np.ndarray) -> np.ndarray:
    """Of [n, 2] rows, those no other row bounds in both columns: max over rows of
    rows @ r (r >= 0) needs only these, usually a handful of the n tiles."""
    rows = rows[np.lexsort((-rows[:, 1], -rows[:, 0]))]        # col 0 descending, then col 1
    prev = np.maximum.accumulate(np.concatenate([[-1], rows[:-1, 1]]))
    return rows[rows[:, 1] > prev]


def per_tile_cost(blocks, fn, T: int) -> int:
    """Cycles of the busiest tile running fn(rows, cols) once per block it holds."""
    r0, nr, c0, nc, tile = blocks
    return int(np.bincount(tile, fn(nr, nc), minlength=T).max(initial=0))

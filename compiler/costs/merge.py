"""MERGE's cycles: the PopLibs vertices a Poplar program would run on one tile to merge the
partial states of `splits` key splits of a query block's `rows` rows (split-key attention;
the kernel: compiler/sim/merge_kernel.py). PopLibs has no merge vertex, so this is a recipe
of popops vertices, each costed by its estimator in vertices.py (the source named there);
the one step no popops vertex does is a copy, costed as Poplar's copy (`assumed`, as every
COPY). Layout on the tile: stats f32[2, splits, rows] (m, then l), parts f16[splits, rows,
cols] (split-major, so one split's rows are contiguous).

  1. M = max_j m_j          a halving tree of BinaryOp1D MAXIMUM f32 in place (the first
                            half of the live splits against the second): ceil(log2 splits)
                            vertices of floor(k / 2) x rows elements while k splits are live
  2. M to every split       a copy of M broadcast to [splits, rows] f32 (Poplar's copy of a
                            broadcast view; popops has no f32 broadcast-subtract estimate here)
  3. m_j - M                BinaryOp1D SUBTRACT f32 over splits x rows
  4. c_j = exp(.)           UnaryOp1D EXPONENT f32 over splits x rows
  5. c_j l_j                BinaryOp1D MULTIPLY f32 over splits x rows
  6. L = sum_j c_j l_j      the halving tree of BinaryOp1D ADD f32
  7. c_j to half            Cast1D f32 -> f16 of splits x rows (the half vertex takes one type)
  8. c_j O_j                BroadcastVectorOuterByRow1D MULTIPLY half over splits x rows rows
  9. sum_j c_j O_j          ADD's reduction of `splits` sources of rows x cols (the cheaper of
                            popops' strided reduction and poplin's ReduceAdd: vector.add_cycles)
 10. x 1 / L                ROWSCALE with F_RECIP: UnaryOp1D INVERSE f32, Cast1D, by-row MULTIPLY

The simulator keeps c_j and the sums in f32 and rounds once (as it does for ROWSCALE, whose
cost also counts a cast to half): the recipe prices the work, not a lower precision."""
from __future__ import annotations

import numpy as np

from . import _i64
from .vector import add_cycles, by_row_cycles, row_value_to_half_cycles, rowscale_cycles
from .vertices import PERF, binary_op_1d_cycles, unary_op_1d_cycles


def tree_cycles(rows, splits, op: str, workers: int, vector_bytes: int):
    """The halving tree of BinaryOp1D `op` f32 reducing [splits, rows] to [rows]."""
    k, total = _i64(splits), 0
    while np.any(k > 1):
        h = k // 2
        total = total + np.where(h > 0, binary_op_1d_cycles(h * _i64(rows), PERF[(op, "f32")], 4, workers,
                                                            vector_bytes), 0)
        k = k - h
    return total


def merge_cycles(rows, cols, splits, workers: int, vector_bytes: int, copy_cycles):
    """MERGE of `splits` partial states of rows x cols (module docstring, steps 1-10);
    copy_cycles(nbytes): Poplar's copy (target.copy_cycles, assumed)."""
    W, V = workers, vector_bytes
    r, c, s = _i64(rows), _i64(cols), _i64(splits)
    n = s * r
    f32 = lambda op: binary_op_1d_cycles(n, PERF[(op, "f32")], 4, W, V)
    stats = (tree_cycles(r, s, "MAXIMUM", W, V) + copy_cycles(4 * n) + f32("SUBTRACT")
             + unary_op_1d_cycles(n, PERF[("EXPONENT", "f32")], 4, W, V, True) + f32("MULTIPLY")
             + tree_cycles(r, s, "ADD", W, V))
    out = (row_value_to_half_cycles(n, W, V) + by_row_cycles(n, c, "MULTIPLY", W, V)
           + add_cycles(r * c, s - 1, W, V) + rowscale_cycles(r, c, 0, 1, W, V))
    return stats + out

"""The two reduction models of compiler/costs/vertices.py against step-by-step emulations of the PopLibs
procedures they summarise, written as loops over workers, pieces and loops (sharing no code or
closed form with compiler/costs/):

- reduce_rows_cycles with fewer rows than workers: popops' ReductionConnection.cpp hands spare
  workers out one at a time to the reduction with the most approximate cycles after one more cut
  (splitTwoStageReductionsBetweenWorkers, getMaxSplit), cuts each row's partials as
  splitRowsToWorkers does, runs each piece on a worker, then each row's piece results;
- add_conv_reduce_cycles: poplin's getReduceCycleEstimate (not single-input, half partials and
  output), counting loops output by output.
"""
from __future__ import annotations

import numpy as np
import pytest

from compiler.costs import vector, vertices

W, VB = 6, 8                  # ipu21: 6 workers, 64-bit vectors (4 halves)


def _continuous(outputs: int, partials: int) -> int:
    """One ContinuousReduce worker vertex, its estimate written out term by term."""
    return outputs * (partials // 4) + (2 if partials % 2 else 0) + 12 * outputs + 10 + 7


def _split_rows(rows: int, n: int) -> list[int]:
    """splitRowsToWorkers(rows, N): at most N groups of at least 2, fewest groups for the max."""
    if rows <= 3 or n <= 1:
        return [rows]
    most = -(-rows // n)
    k = min(rows // 2, -(-rows // most))
    out = [rows // k] * k
    for i in range(rows % k):
        out[i] += 1
    return out


def _emulate_rows(r: int, c: int) -> int:
    """A tile's r row reductions of c half partials each, as popops would run them."""
    if r >= W:
        per = [0] * W
        for i in range(r):                     # greedy: equal reductions land round robin
            per[i % W] += 1
        return W * _continuous(max(per), c)
    approx = -(-c // 8)                        # opsPerCycle: ADD of half to one output, 8 a cycle
    max_split = min(c // 2, approx // 4)
    splits = [1] * r
    free = W - r
    while free > 0:
        best, best_cyc = None, 0
        for i in range(r):
            if splits[i] + 1 >= max_split:
                continue
            after = approx // (splits[i] + 1)
            if after > best_cyc:
                best, best_cyc = i, after
        if best is None:
            break
        splits[best] += 1
        free -= 1
    if max(splits) == 1:
        return W * _continuous(1, c)           # one row a worker, one stage
    pieces = [_split_rows(c, s) for s in splits]
    first = max(_continuous(1, p) for ps in pieces for p in ps)
    second = max(_continuous(1, len(ps)) for ps in pieces if len(ps) > 1)    # uncut rows are done
    return W * (first + second)


def _emulate_reduce_add(out_size: int, depth: int, float_partials: bool = False) -> int:
    """getReduceCycleEstimate(outSize, depth, 64, half out, half partials (or float:
    policy.f32_partials), not single input)."""
    acc, per_load = (4, 2) if float_partials else (8, 4)     # accVectorWidth, partials a 64-bit load
    cycles = 32
    per_loop = acc // min(acc, per_load) + 1
    loops = out_size // acc
    for bit in range(acc.bit_length() - 1):    # ceilLog2(acc) low bits, one loop each if set
        if out_size & (1 << bit):
            loops += 1
    each = loops // W
    if loops % W:
        if out_size & (acc - 1):
            cycles += 2 * depth + (13 if float_partials else 11)
        else:
            each += 1
    cycles += (per_loop * depth + (6 if float_partials else 8)) * each
    return cycles * W


@pytest.mark.parametrize("r", [1, 2, 3, 4, 5, 6, 7, 8, 13])
def test_row_reduction_matches_popops_procedure(r):
    cols = [1, 2, 3, 7, 16, 31, 32, 33, 63, 64, 65, 100, 127, 128, 255, 511, 729, 730, 1152, 2053, 4304]
    got = vertices.reduce_rows_cycles(np.full(len(cols), r), np.asarray(cols), W, VB)
    assert got.tolist() == [_emulate_rows(r, c) for c in cols]


def test_reduce_add_matches_poplin_estimate_output_by_output():
    n, s = np.meshgrid(np.arange(1, 700), np.arange(1, 30), indexing="ij")
    got = vertices.add_conv_reduce_cycles(n.ravel(), s.ravel(), W, VB)
    want = [_emulate_reduce_add(int(a), int(b)) for a, b in zip(n.ravel(), s.ravel())]
    assert got.tolist() == want


def test_the_cheaper_reduction_vertex_is_charged():
    """ADD of 3+ sources: whichever of the two vertices is cheaper for the shape (both occur on
    So400m: 6 partials of 1792 outputs ReduceAdd, 23 of 576 the strided one)."""
    assert int(vector.add_cycles(1792, 5, W, VB)) == _emulate_reduce_add(1792, 6) < int(
        vertices.add_reduce_cycles(1792, 6, W, VB))
    assert int(vector.add_cycles(576, 22, W, VB)) == int(vertices.add_reduce_cycles(576, 23, W, VB)) < \
        _emulate_reduce_add(576, 23)

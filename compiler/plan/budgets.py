"""The memory budgets the beam prunes with (plan/beam.py): region 1's share for resident
weights and for ring pieces read in place, and where ring copies or whole-unit pieces
(with their pooled request's padding to element pairs) would overfill a tile.
Estimates to prune with; expand's exact screens decide."""
from __future__ import annotations

import numpy as np

from ..target import Target


# assumed: the slack (memory elements) a state holding ring pieces read in place keeps under
# copies_over's limit: the per-grid figure counts every other weight as its home block, not
# its pieces (the pooled request's rounding to whole element pairs is counted apart:
# pair_padding); at 27 So400m layers expand's footprint exceeded that figure plus the
# extras by 15-19 KB (experiments/comm/README.md, policy.ring_units)
UNITS_MARGIN_ELEMENTS = 1


def copies_over(states, base: np.ndarray, extra: np.ndarray, limit, padding=0) -> np.ndarray:
    """[states, grids]: where ring copies (policy.ring_copies) would overfill a tile: the
    fullest grid's memory figure so far or this grid's (plan/matmul.py: the homes of
    every weight plus its working set), plus the bytes every copy chosen adds, plus
    `padding` ([states, grids]: pair_padding of the pieces read in place), over `limit`.
    Only states holding some copy or padding are judged (the others passed the per-grid
    screen). The figure is plan's estimate; expand's exact screen decides (and keeps
    each candidate's twin without copies: plan/ring.py uncopied). `limit`: one figure,
    or [states, grids]."""
    out = []
    limit = np.broadcast_to(limit, (len(states), len(base)))
    padding = np.broadcast_to(padding, (len(states), len(base)))
    for k, s in enumerate(states):
        held = s.extra + extra + padding[k]
        out.append((held > 0) & (np.maximum(s.peak0, base) + held > limit[k]))
    return np.stack(out)


def pair_padding(seq, t: Target):
    """Bytes a tile loses to rounding `seq` (plan's bytes of ring pieces read in place that
    are Repeat sequences, summed over weights: beam.py State.r1_seq) up to whole element
    pairs. Expand pools those pieces in one bank-separated region-1 request per tile
    (expand/ring.py pooled_homes), and such a sequence owns every pair its extent touches:
    expand's unit screen (analysis.unit_waste) and placement's bound count that padding.
    Without it the tiny 8-layer batch-4 trial's lean beam (tests/test_batch_plans.py)
    kept only unit-piece candidates, 1,668-4,639 B over a tile, and expand rejected them
    all (#26). As expand's rule, with no profile samples sharing the last pair: an upper
    bound wherever plan's piece bytes bound expand's extent (tests/test_unit_padding.py)."""
    pair = 2 * t.element_bytes
    seq = np.asarray(seq, np.int64)
    return -(-seq // pair) * pair - seq


# assumed: elements of region 1 that ring pieces read in place leave to the rest: one pair,
# the pooled pieces' request rounded up to the element pairs it owns (expand/ring.py
# pooled_homes); their operand buffers hold only received pieces. At 27 So400m layers
# the sum of pieces plus one pair left 18 KB of region 1 where the two pairs of
# region1_budget rejected the plan (experiments/comm/README.md, policy.ring_units)
IN_PLACE_RESERVE_ELEMENTS = 2


def in_place_budget(t: Target) -> int:
    """Region-1 bytes ring pieces read in place may take on a tile, summed over weights
    (policy.ring_in_place, ring_units): an estimate to prune with, expand's region-1
    screen decides (and keeps the best candidate's word-cut twin, plan/ring.py)."""
    return t.region1_bytes - IN_PLACE_RESERVE_ELEMENTS * t.element_bytes


def region1_budget(t: Target) -> int:
    """Region-1 bytes resident weights, or weights read in place, may take on a tile: all
    of it but two element pairs (the other 128-bit operands, such as gathered b blocks, and
    rounding a bank-separated sequence up to the pairs it owns); plan.resident_budget."""
    return t.region1_bytes - 4 * t.element_bytes

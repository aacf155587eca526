"""The memory budgets the beam prunes with (plan/beam.py): region 1's share for resident
weights and for ring pieces read in place, and where ring copies or whole-unit pieces
(with their pooled request's padding to element pairs) would overfill a tile.
Estimates to prune with; expand's exact screens decide."""
from __future__ import annotations

import numpy as np

from ..target import Target


# assumed: the slack (memory elements) a state holding ring pieces read in place keeps under
# the copy screen's limit (pruned): the per-grid figure counts every other weight as its home
# block, not its pieces (the pooled request's rounding to whole element pairs is counted apart:
# pair_padding); at 27 So400m layers expand's footprint exceeded that figure plus the
# extras by 15-19 KB (experiments/comm/README.md, policy.ring_units)
UNITS_MARGIN_ELEMENTS = 1


def windows(load: np.ndarray, cursor: int):
    """For a grid laid on tiles [cursor, cursor + n) (mod T): the fullest tile inside
    (pre[n - 1]) and outside (post[n]) the window, for every n."""
    r = np.roll(load, -cursor)
    pre = np.maximum.accumulate(r)
    post = np.append(np.maximum.accumulate(r[::-1])[::-1], 0)
    return pre, post


def pruned(states, si, gi, grid: dict, t: Target, reserve: int, res=None, share: int = 0,
           in_place: bool = True) -> np.ndarray:
    """bool [len(si)]: whether grid gi[j] taken in state states[si[j]] overfills a tile by
    plan's estimates, so the beam drops it. Element-wise in (state, grid), so the beam asks
    only about its cheapest pairs (beam.cheapest). `grid`: the op's per-grid arrays
    (beam_search). Three screens:
    - resident grids (`res`, the resident beam's budgets; `share` the op's region-1 bytes
      over all tiles): the fullest tile of the grid's window (windows) against region 1
      and, with the homes and working set, against the tile (only pairs keeping something
      resident: homes states are what plan/matmul.py's screen admitted);
    - ring copies and whole-unit pieces (policy.ring_copies, ring_units) with the pair
      padding of the pieces read in place (pair_padding): the fullest grid's memory figure
      so far or this grid's (plan/matmul.py: every weight's home plus the working set),
      plus what the extras add, over the tile less `reserve` (and one margin element
      where pieces are read in place). Only pairs holding some extra are judged (the
      others passed the per-grid screen);
    - ring pieces read in place (`in_place`: some state or grid holds any): their region-1
      bytes, summed over weights, beyond in_place_budget.
    The figures are plan's estimates; expand's exact screens decide (and keep each
    candidate's twin without copies: plan/ring.py uncopied)."""
    col = lambda f: np.fromiter((getattr(states[k], f) for k in si), np.int64, len(si))
    r1 = col("r1") + grid["r1"][gi]
    out = np.zeros(len(si), bool)
    if res is not None:
        still, tiles, own = grid["still"][gi], grid["tiles"][gi], grid["own"][gi]
        u, inv = np.unique(si, return_inverse=True)
        pre, post = map(np.stack, zip(*(windows(states[k].load, states[k].cursor) for k in u)))
        inv = inv.ravel()
        peak = np.where(still, np.maximum(pre[inv, tiles - 1] + own, post[inv, tiles]), pre[inv, -1])
        mem = peak + col("homes") - grid["gone"][gi] + np.maximum(col("work"), grid["work"][gi])
        bad = (own * tiles > share) | (still & (res.max_rep > 0) & (grid["gm"][gi] > res.max_rep))
        out |= bad | (peak + r1 > res.region1) | ((peak > 0) & (mem > res.memory))
    held = col("extra") + grid["extra"][gi] + pair_padding(col("r1_seq") + grid["r1_seq"][gi], t)
    limit = t.tile_bytes - reserve - (r1 > 0) * UNITS_MARGIN_ELEMENTS * t.element_bytes
    out |= (held > 0) & (np.maximum(col("peak0"), grid["base"][gi]) + held > limit)
    if in_place:
        out |= r1 > in_place_budget(t)
    return out


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

"""Ring homes (policy.ring_homes): a weight's home is its matmul's grid, each block
held once, cut in pieces over the gm tiles that read it.

At depth a weight cannot be replicated where it is read (27 So400m layers' FP8
weights are ~280 KB of every tile held once), so a grid with gm > 1 gathers its B
blocks every layer from homes laid out for no grid in particular: each of its tiles
receives its whole kb × nb block. T10 (SOSP 2024) instead keeps every weight where
it is used without replication: the gm tiles sharing a block each hold a disjoint
piece of it and pass the pieces around a ring. Here a piece is a column range of the
block (whole words; in an FP8 weight's micro-panel order a column is P contiguous
bytes of each panel row), piece p on the grid's tile (i = p, j, l) for every member
of the Repeat's weight sequence, so:

  * every weight byte stays resident on one tile that reads it, at any depth (memory:
    one copy, as homes);
  * each use, the gm tiles of a block column pass their pieces to each other, so a
    tile receives the block less its own piece ((gm - 1)/gm of it) and sends its
    piece to its gm - 1 peers; its own piece is a local COPY into the operand buffer,
    in the matmul's compute superstep (the exchange cannot send a tile to itself for
    free: a self-transfer costs both directions).

The pass is one exchange superstep, not gm - 1 ring shifts: in this machine's
bulk-synchronous model compute and exchange never overlap, so g - 1 shifts move the
same bytes at g - 1 phases and syncs, with the matmul cut into g narrower AMP calls;
one superstep is the ring's traffic at the least cost.

A block narrower than gm pieces of whole words (q columns) is cut into fewer; tiles
without a piece receive the whole block (plan prices the busiest tile, so such grids
gain nothing on the receive side and the beam judges them by cost).

Plan's beam prices both for every eligible matmul (Options field `ring`, with_ring
below); expand builds the homes and the local copies (compiler/expand/ring.py) from
ring_starts, so the two agree.

Ring copies (policy.ring_copies, Grid.copies): each piece may also be held by c > 1 of
the gm tiles (replica d on grid row (p + d) mod pieces), a point further along T10's
time-memory Pareto set: a tile receives the block less c pieces and copies c locally,
for count × c pieces of memory. A copy nets w/8 - 40 cycles per layer for count × w
bytes of every tile of the grid (the local COPY runs at 8 B/cycle, the exchange at 4),
so the beam takes one only where memory is left (budgets.pruned; experiments/comm).

Read in place (policy.ring_in_place, Grid.inplace): the local COPY goes if the MATMUL
reads a tile's own pieces where they live, its b in segments (isa.F_SEG_B: the received
pieces in the operand buffer, each own piece at its home address, relocated per Repeat
iteration). A segment must be whole AMP output-channel groups (the vertex reads one weight
pointer per group), so such pieces are cut in multiples of the group (16 columns): coarser
than words, so a narrow block has fewer pieces than tiles and some tile then receives all
of it. The beam prices both kinds per matmul; a copy then nets w/4 per layer, not w/8 - 40.

In 2-D units (policy.ring_units, Grid.inplace 3, label suffix `u`): a unit is one (in-channel
group and panel) × (out-channel group) block, the vertex's weight-pointer granularity; a
block's units in column-major order are cut into near-equal runs (unit_pieces), read as
rectangles of b (isa.F_SEG_2D; compiler/expand/ring2d.py). fc1's 288 × 48 block at 27
layers is 27 units (7, 7, 7, 6 over 4 tiles) where columns give 3 and k 9. Whole units
hold a little more than word-cut pieces (the excess counts as `extra`, budgets.pruned).
"""
from __future__ import annotations

import numpy as np


def ring_starts(width: int, gm: int, q: int) -> np.ndarray:
    """Column starts, within a block `width` columns wide, of its pieces for gm tiles:
    at most gm, balanced in whole multiples of q columns (the last takes the rest)."""
    units = max(1, width // max(q, 1))
    s = min(gm, units)
    return np.arange(s, dtype=np.int64) * units // s * q


def _pieces(width, gm, q):
    """Vectorised ring_starts over grids: (largest piece, pieces, smallest piece)."""
    width, gm = np.asarray(width, np.int64), np.asarray(gm, np.int64)
    units = np.maximum(1, width // q)
    s = np.minimum(gm, units)
    return q * -(-units // s) + width % q, s, np.minimum(q * (units // s), width)


def in_place_quantum(q: int, group: int) -> int:
    """Column quantum of pieces read in place (policy.ring_in_place): whole words (or
    panel columns, q) and whole AMP output-channel groups (`group`: a MATMUL's b
    segments but the last must be, isa.F_SEG_B)."""
    return int(np.lcm(max(q, 1), max(group, 1)))


def with_ring(o, N: int, eb: int, q: int, count: int, home_blk: int, t, copies: int = 1, group: int = 0,
              inplace: bool = False, K: int = 0, qk: int = 0, units: bool = False):
    """The grids of o (plan/beam.py Options) twice or more: B gathered from its homes (ring 0),
    then from ring homes (ring 1), each piece held by c = 1 .. `copies` of the gm tiles
    (Options field `copies`; c < gm and c < the block's pieces: ring copies, policy.ring_copies).
    For ring grids: `ring_recv` / `ring_send`, the B bytes the busiest grid tile receives
    (the block less its c smallest pieces) / sends (each of its c pieces to its share of
    the gm - c tiles without it), max over the full and the last, narrower block;
    `rest` gains the local copies of its pieces (one COPY each); `mem` trades the
    weight's home block (count × home_blk, plan/homes.py) for count × its c largest pieces;
    `cycles` (the standalone estimate) takes that exchange. With `inplace`
    (policy.ring_in_place) each ring choice also comes read in place (Options field
    `inplace`): 1, column pieces of whole out-channel groups (in_place_quantum, `group`);
    2, row pieces (along k, K rows) of whole in-channel groups and panels (`qk`); no local
    COPY, and an operand buffer of the received pieces only. With `units` (policy.ring_units)
    also 3: pieces of whole (in-group × out-group) units read in place (unit_pieces)."""
    n = len(o)
    kinds = [(0, 1, 0)] + [(1, c, 0) for c in range(1, max(1, copies) + 1)]
    kinds += [(1, c, axis) for axis in (1, 2) for c in range(1, max(1, copies) + 1)] if inplace else []
    kinds += [(1, c, 3) for c in range(1, max(1, copies) + 1)] if units else []
    a = {k: np.concatenate([v] * len(kinds)) for k, v in o.a.items()}
    ring, cop, inp = (np.repeat([k[i] for k in kinds], n) for i in (0, 1, 2))
    a["ring"], a["copies"], a["inplace"] = ring, cop, inp
    kb, nb, gn, gm, gk = a["kb"], a["nb"], a["gn"], a["gm"], a["gk"]
    recv, send, own, own1, copy = (np.zeros(len(ring), np.int64) for _ in range(5))
    usable = cop < np.maximum(gm, 2)
    rows = inp == 2                                                  # pieces along k
    qq = np.where(inp == 1, in_place_quantum(q, group), np.where(rows, max(qk, 1), q))
    other = np.where(rows, nb, kb)                                   # the block's extent across the pieces
    last = np.where(rows, np.maximum(K - (gk - 1) * kb, 1), np.maximum(N - (gn - 1) * nb, 1))
    for width in (np.where(rows, kb, nb), last):                     # the full block, the last one
        w, pieces, least = _pieces(width, gm, qq)
        k = np.minimum(cop, pieces)                                  # pieces a tile holds
        usable &= (cop == 1) | (cop < pieces)
        least = np.where(pieces == gm, least * k, 0)                 # a tile may own nothing
        piece = other * w * eb
        recv = np.maximum(recv, other * (width - least) * eb)
        send = np.maximum(send, piece * k * -(-(gm - k) // k))
        own = np.maximum(own, k * (-(-piece // 16) * 16))
        own1 = np.maximum(own1, -(-piece // 16) * 16)
        copy = np.maximum(copy, np.where(inp > 0, 0, k * t.copy_cycles(piece)))
    two = inp == 3                       # 2-D units: both blocks' extents (own1 stays the word-cut piece)
    if two.any():
        qu = in_place_quantum(q, group)
        lastk, lastn = np.maximum(K - (gk - 1) * kb, 1), np.maximum(N - (gn - 1) * nb, 1)
        got = [unit_pieces(rk[two], cn[two], gm[two], cop[two], max(qk, 1), qu, eb)
               for rk in (kb, lastk) for cn in (nb, lastn)]
        recv[two], send[two], own[two] = (np.max([x[f] for x in got], 0) for f in range(3))
        usable[two] = (cop[two] < np.maximum(gm[two], 2)) & np.all([x[4] for x in got], 0)
    on = ring == 1
    a["ring_recv"] = np.where(on, recv, 0)
    a["ring_send"] = np.where(on, send, 0)
    a["rest"] = a["rest"] + np.where(on, copy, 0)
    a["mem"] = a["mem"] + np.where(on, count * (own - home_blk), 0) - np.where(inp > 0, own, 0)
    # what copies, or whole-unit pieces, add over one word-cut piece (budgets.pruned): the
    # per-grid memory figure counts every other weight as its home block, about that piece
    a["extra"] = np.where(on & ((cop > 1) | two), count * (own - own1), 0)
    a["r1"] = np.where(inp > 0, count * own, 0)       # in place: the pieces sit in region 1 (beam.py State.r1)
    a["r1_seq"] = a["r1"] * (count > 1)               # ... a Repeat sequence there owns whole pairs (State.r1_seq)
    bw = t.exchange_bytes_per_cycle
    a["cycles"] = np.where(on, a["rest"] + t.exchange_phase_cycles
                           + -(-np.maximum(a["recv_a"] + a["ring_recv"], send) // bw), a["cycles"])
    keep = (~on | (a["mem"] <= t.tile_bytes)) & (~on | usable)      # plan/matmul.py's memory screen
    return type(o)(o.op, {k: v[keep] for k, v in a.items()})


def unit_pieces(rows, cols, gm, cop, qk: int, qn: int, eb: int):
    """Pieces of whole units (qk rows × qn columns: in-channel groups and panels × out-channel
    groups; the block's last row and column of units may be narrower), policy.ring_units:
    a rows × cols block's U units in column-major order cut into s = min(gm, U) runs of
    U·p//s .. U·(p+1)//s (compiler/expand/ring2d.py), c = cop of them held per tile.
    Returns, per grid: the bytes the busiest tile receives (the block less its c smallest
    pieces; a tile may hold none), sends (each piece to its share of the gm − c tiles
    without it), holds (c largest pieces, 16-byte padded per unit column), one piece's
    hold, and whether c < pieces (or c = 1). Pieces are priced in proportion to their units."""
    rows, cols, gm, cop = (np.asarray(x, np.int64) for x in (rows, cols, gm, cop))
    U = -(-rows // qk) * -(-cols // qn)
    s = np.minimum(gm, U)
    k = np.minimum(cop, s)
    block = rows * cols * eb
    least, most = block * (U // s) // U, -(-block * -(-U // s) // U)
    recv = block - np.where(s == gm, k * least, 0)
    send = most * k * -(-(gm - k) // k)
    strips = np.minimum(-(-cols // qn), -(-(-(-U // s)) // np.maximum(1, -(-rows // qk))) + 1)
    one = most + 16 * strips
    return recv, send, k * one, one, (cop == 1) | (cop < s)


def ring_exchange(c, o, a_held: np.ndarray) -> np.ndarray:
    """The operand exchange of ring grids (Costs.exchange): receivers get their A block
    and the block less their piece; senders send A (a_held: bytes of A each tile holds,
    sent gn times) and the grid's tiles (the first gg·gm·gn·gk: homes grids are not
    rotated) their piece to gm - 1 peers, on a grid tile added to its A."""
    a = np.asarray(a_held, np.int64)
    tiles = o.a["gg"] * o.a["gm"] * o.a["gn"] * o.a["gk"]
    inside = np.maximum.accumulate(a)[np.minimum(tiles, len(a)) - 1]
    outside = np.append(np.maximum.accumulate(a[::-1])[::-1], 0)[np.minimum(tiles, len(a))]
    send = np.maximum(inside * o.a["gn"] + o.a["ring_send"], outside * o.a["gn"])
    return c.exchange(o.a["recv_a"] + o.a["ring_recv"], send)


def ring_operand(g, n: int, t, panels: dict) -> dict | None:
    """What with_ring needs of matmul n's weight, or None when its B cannot have a ring
    home: B must be a parameter read once, as the b operand of this ungrouped matmul
    (plan/matmul.py stationary_weights: a Repeat's sequence member inside one), not
    transposed (pieces are column ranges of [k, n] blocks), and in the order its AMP reads."""
    from ..target import DTYPE_BYTES
    from .homes import home_blocks
    from .matmul import stationary_weights, word_elems
    op = g.ops[n]
    if op.attr("transpose_b", False) or op.inputs[1] not in stationary_weights(g):
        return None
    B = g.tensors[op.inputs[1]]
    P = panels.get(B.name, 0)
    if t.amp_panel_elems.get(B.dtype, 0) and not P:
        return None                  # read as micro-panels but stored row-major (policy.panel_homes off)
    count = g.repeat.count if g.repeat and B.name in g.repeat.sequences else 1
    home_blk = int(home_blocks(*B.shape, DTYPE_BYTES[B.dtype], t.tiles, P)[1].max())
    amp = t.amp_dtype(B.dtype, g.tensors[op.inputs[0]].dtype)
    return dict(N=B.shape[1], eb=DTYPE_BYTES[B.dtype], q=1 if P else word_elems(B.dtype), count=count,
                home_blk=home_blk, group=t.amp_out_group[amp], K=B.shape[0], qk=k_quantum(t, amp, P))


def k_quantum(t, amp: str, P: int) -> int:
    """Row quantum of pieces cut along k and read in place: whole AMP input-channel groups
    of the AMP type `amp`, and whole micro-panels (height P) of a panel-ordered b (the
    machine's rule for F_SEG_K segments, isa.py)."""
    return int(np.lcm(t.amp_in_group[amp], max(P, 1)))


def with_rings(g, options: dict, t, panels: dict, copies: int = 1, inplace: bool = False,
               units: bool = False) -> dict:
    """options with a ring choice (with_ring, up to `copies` holders of each piece, and
    with `inplace` each also read in place, with `units` in 2-D units) for every matmul
    whose weight can have one."""
    out = {}
    for n, o in options.items():
        r = ring_operand(g, n, t, panels)
        out[n] = o if r is None else with_ring(o, t=t, copies=copies, inplace=inplace, units=units, **r)
    return out


def unringed(cand):
    """cand with every weight in its plain homes (its grids without Grid.ring): expand's
    fallback when ring homes, like resident weights, gather a weight onto too few tiles
    for placement (a forced or narrow grid at depth)."""
    from dataclasses import replace
    return replace(cand, strategy=tuple((n, replace(g, ring=0, copies=1, inplace=0)) for n, g in cand.strategy))


def uncopied(cand):
    """cand with each ring piece held once (its grids with Grid.copies 1): expand's
    fallback when ring copies (policy.ring_copies), priced by plan against a per-matmul
    memory screen, leave some tile too full with the other weights' homes."""
    from dataclasses import replace
    return replace(cand, strategy=tuple((n, replace(g, copies=1)) for n, g in cand.strategy))


def word_cut(cand):
    """cand with every piece read in place in 2-D units (Grid.inplace 3, policy.ring_units)
    cut in words and copied instead, its holders kept: expand's fallback when such pieces,
    screened by plan's estimate, leave some tile or region 1 too full."""
    from dataclasses import replace
    return replace(cand, strategy=tuple((n, replace(g, inplace=0) if g.inplace == 3 else g) for n, g in cand.strategy))


def in_units(cand) -> bool:
    """Whether cand reads some ring piece in place in 2-D units."""
    return any(g.ring and g.inplace == 3 for _, g in cand.strategy)


def copied(cand) -> bool:
    """Whether cand holds some ring piece on more than one tile."""
    return any(g.ring and g.copies > 1 for _, g in cand.strategy)


def concentrated(cand) -> bool:
    """Whether cand holds some weight on its grid's tiles only (resident or ring homes)."""
    return bool(cand.resident) or any(g.ring for _, g in cand.strategy)

"""Split-key (flash) attention: the partial states of a query block's key splits merged by
one MERGE kernel (`policy.flash_merge`, on by default; off: flash_combine.py's composition
of ~20 ONLINE_SOFTMAX / ROWSCALE / ADD calls).

Split j of a query block of R rows ends its walk with an unnormalised O_j f16[R, d] and
its state f32[3, R] (running max m_j, sum l_j, correction). The block's rows are cut into
one slice per split tile (flash_combine.slices: even row counts, so every operand stays
8-byte aligned); in one exchange step tile k gathers every split's slice k of O into
parts[j] (f16[ns, r, d]) and of m and l into stats (f32[2, ns, r]: the m rows, then the l
rows), its own slice by a local transfer; in the next compute step one MERGE writes its
slice of the output, rows [ss, ss + r) of the block. No tail step on the split tiles:
MERGE reads the f32 state as the walk left it."""
from __future__ import annotations

import numpy as np

from .. import isa
from ..target import STANDARD
from .flash_combine import slices

F16 = isa.DTYPES["f16"]
STAT_BYTES = 8          # m and l of one row, f32 each


def combine(c, name: str, grp_tile, R, state, o, d: int, ns: int):
    """Merge the ns partials of every query block (split j of block g on tile
    grp_tile[g] + j). Returns (block, slice start, rows, tile, request) per slice."""
    blk, ss, r = slices(R, ns)
    k = np.arange(len(blk)) - np.searchsorted(blk, blk)   # slice index within its block
    tile = grp_tile[blk] + k
    x = c.exchange_step()
    ST, OP = (c.bld.alloc(f"{name}.{n}", tile, size, 8, STANDARD, x)
              for n, size in (("mstats", STAT_BYTES * ns * r), ("mparts", 2 * ns * r * d)))
    _gather(c, x, tile, grp_tile[blk], ss, r, R[blk], state, o, ST, OP, d, ns)
    s = c.compute_step()
    out = c.bld.alloc(f"{name}.merged", tile, 2 * r * d, 8, STANDARD, s)
    c.kernel(step=s, tile=tile, op=isa.MERGE, dtype=F16, r0=out[tile], r1=OP[tile], r2=ST[tile],
             i0=r, i1=d, i2=ns)
    for b in (ST, OP):
        c.bld.reads(b[tile], s)
    return blk, ss, r, tile, out


def _gather(c, x, tile, src0, ss, r, Rb, state, o, ST, OP, d, ns):
    """Slice k of split j lands in slot j on tile k."""
    j = np.tile(np.arange(ns), len(tile))
    i = np.repeat(np.arange(len(tile)), ns)
    src, dst, ss, r, Rb = src0[i] + j, tile[i], ss[i], r[i], Rb[i]
    add = c.bld.add
    # m and l rows (rows 0 and 1 of the state f32[3, R]) into stats[:, j]
    add("xfer", step=x, src=src, dst=dst, sreq=state[src], soff=4 * ss, s_row_bytes=4 * r, s_rows=2,
        s_stride=4 * Rb, dreq=ST[dst], doff=4 * r * j, d_row_bytes=4 * r, d_rows=2, d_stride=4 * ns * r)
    # the O rows into parts[j]
    add("xfer", step=x, src=src, dst=dst, sreq=o[src], soff=2 * d * ss, s_row_bytes=2 * d * r, s_rows=1,
        s_stride=2 * d * r, dreq=OP[dst], doff=2 * d * r * j, d_row_bytes=2 * d * r, d_rows=1,
        d_stride=2 * d * r)
    for b in (state, o):
        c.bld.reads(b[src], x)


def cost(t, R: int, ns: int, d: int) -> int:
    """Cycles the partial exchange and the MERGE step add on the largest block (each
    step's sync included): a merge tile receives ns slices of r rows, a split tile
    sends its R rows (its own slice too)."""
    r = int(-(-(-(-R // ns)) // 2) * 2)
    row = 2 * d + STAT_BYTES
    exch = t.exchange_phase_cycles + -(-max(ns * r * row, R * row) // t.exchange_bytes_per_cycle)
    return int(exch + int(t.merge_cycles(r, d, ns)) + 2 * t.sync_cycles)

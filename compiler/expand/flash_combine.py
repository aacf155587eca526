"""FlashAttention key splits: merging the partial (O, m, l) of a query block's key splits.

Split j of a query block ends its walk with an unnormalised O_j [R, d] (f16) and the
state f32[3, R] (running max m_j, sum l_j). The exact merge is M = max_j m_j,
c_j = exp(m_j - M), O = Σ c_j·O_j / Σ c_j·l_j. The block's rows are cut into one
slice per split tile; tile k gathers every split's slice k and merges it with the
existing kernels only:

  * m_j is an f16 score in f32 (ONLINE_SOFTMAX runs at scale 1: the score MATMUL
    applies the softmax scale), so ROWSCALE(ones, m_j) = x_j in f16 is exact, and
    ONLINE_SOFTMAX over the row [x_0 x_0 x_1 x_1 ...] puts the exact M in its state.
  * ONLINE_SOFTMAX with state (m_j, l_j) over the f16 column pair (M, M) (not first)
    yields c = exp(m_j - M) exactly and l = l_j·c + 2 (two exp(0) terms).
  * ROWSCALE(ones, l, + (-2)) = f16(l_j·c_j) rounded once; ADD sums the splits in f32.
  * ROWSCALE scales every O_j by c_j, ADD sums them in f32, ROWSCALE divides by the
    sum (moved to f32 as the max of a one-value ONLINE_SOFTMAX row).

Constants come from data: ONLINE_SOFTMAX at scale 0 over finite values writes 1s,
at scale -2 over 1s puts -2 in its max. Row slices and pairs keep every operand
8-byte aligned (slices have an even row count)."""
from __future__ import annotations

import numpy as np

from .. import isa
from ..target import STANDARD
from .layout import pad

F16 = isa.DTYPES["f16"]


def slices(R: np.ndarray, ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row slices of query blocks of R rows (even) over ns split tiles: per slice its
    block, start and rows (even, so every slice of f16 pairs or d-rows is 8-aligned)."""
    r = pad(-(-R // ns), 2)
    n = -(-R // r)
    blk = np.repeat(np.arange(len(R)), n)
    k = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    ss = k * r[blk]
    return blk, ss, np.minimum(r[blk], R[blk] - ss)


def tail(c, name: str, step: int, tile, rows, qb, state):
    """On every split tile after its walk: x = f16 pairs of the running max."""
    bld = c.bld
    ones = bld.alloc(f"{name}.ones", tile, 4 * rows, 8, STANDARD, step)
    scr = bld.alloc(f"{name}.sstate", tile, 12 * rows, 8, STANDARD, step)
    xp = bld.alloc(f"{name}.xp", tile, 4 * rows, 8, STANDARD, step)
    _ones(c, step, tile, ones[tile], qb[tile], scr[tile], rows)
    c.kernel(step=step, tile=tile, op=isa.ROWSCALE, dtype=F16, r0=xp[tile], r1=ones[tile], r2=state[tile],
             i0=rows, i1=2)
    bld.reads(qb[tile], step)
    bld.reads(state[tile], step)
    return xp


def _ones(c, step, tile, out, src, st, rows):
    """out[rows, 2] = 1: exp(s - max s) with s = finite src * 0."""
    c.kernel(step=step, tile=tile, op=isa.ONLINE_SOFTMAX, dtype=F16 | isa.F_FIRST << 16, r0=out, r1=src, r2=st,
             i0=rows, i1=2, i2=isa.f32_bits(0.0))


def combine(c, name: str, grp_tile, R, xp, state, o, d: int, ns: int):
    """Merge the ns partials of every query block (split j of block g on tile
    grp_tile[g] + j). Returns (block, slice start, rows, tile, request) per slice."""
    blk, ss, r = slices(R, ns)
    k = np.arange(len(blk)) - np.searchsorted(blk, blk)   # slice index within its block
    tile = grp_tile[blk] + k
    Rb = R[blk]
    x = c.exchange_step()
    X, MS, OP = (c.bld.alloc(f"{name}.{n}", tile, size, 8, STANDARD, x)
                 for n, size in (("xs", 4 * ns * r), ("ms", 12 * ns * r), ("op", 2 * ns * r * d)))
    _gather_partials(c, x, tile, grp_tile[blk], ss, r, Rb, xp, state, o, X, MS, OP, d, ns)
    s = c.compute_step()
    out = _merge(c, name, s, tile, r, X, MS, OP, d, ns)
    return blk, ss, r, tile, out


def _gather_partials(c, x, tile, src0, ss, r, Rb, xp, state, o, X, MS, OP, d, ns):
    """Slice k of split j lands in slot j on tile k (tile k's own slice too: a local
    transfer keeps every slot filled the same way)."""
    j = np.tile(np.arange(ns), len(tile))
    i = np.repeat(np.arange(len(tile)), ns)
    src, dst, ss, r, Rb = src0[i] + j, tile[i], ss[i], r[i], Rb[i]
    add = c.bld.add
    # x pairs into column pair j of X [r, 2·ns]
    add("xfer", step=x, src=src, dst=dst, sreq=xp[src], soff=4 * ss, s_row_bytes=4 * r, s_rows=1,
        s_stride=4 * r, dreq=X[dst], doff=4 * j, d_row_bytes=4, d_rows=r, d_stride=4 * ns)
    # m and l rows into rows 0 and 1 of MS f32[3, ns·r], split-major
    add("xfer", step=x, src=src, dst=dst, sreq=state[src], soff=4 * ss, s_row_bytes=4 * r, s_rows=2,
        s_stride=4 * Rb, dreq=MS[dst], doff=4 * r * j, d_row_bytes=4 * r, d_rows=2, d_stride=4 * ns * r)
    # the O rows into slot j of OP [ns, r, d]
    add("xfer", step=x, src=src, dst=dst, sreq=o[src], soff=2 * d * ss, s_row_bytes=2 * d * r, s_rows=1,
        s_stride=2 * d * r, dreq=OP[dst], doff=2 * d * r * j, d_row_bytes=2 * d * r, d_rows=1,
        d_stride=2 * d * r)
    for b in (xp, state, o):
        c.bld.reads(b[src], x)


def _merge(c, name, s, tile, r, X, MS, OP, d, ns):
    bld, t = c.bld, tile
    n = ns * r                                        # rows of the split-major stacks
    buf = lambda nm, size: bld.alloc(f"{name}.{nm}", t, size, 8, STANDARD, s)
    scr, ones, mrep = (buf(nm, 4 * n) for nm in ("scr", "ones1", "mrep"))
    hl, sst = buf("hl", 8 * n), buf("cstate", 12 * n)
    sx, sl, c2s, l2 = buf("sx", 12 * r), buf("sl", 12 * r), buf("c2s", 4 * r), buf("l2", 4 * r)
    out, lo = buf("o", 2 * r * d), buf("lo", 2 * r * d)
    k = lambda **kw: c.kernel(step=s, tile=t, **kw)
    osm = lambda first, **kw: k(op=isa.ONLINE_SOFTMAX, dtype=F16 | (isa.F_FIRST << 16 if first else 0), **kw)
    rsc = lambda flags=0, **kw: k(op=isa.ROWSCALE, dtype=F16 | flags << 16, **kw)
    f32 = isa.f32_bits
    osm(True, r0=scr[t], r1=X[t], r2=sx[t], i0=r, i1=2 * ns, i2=f32(1.0))          # M = max_j m_j
    _ones(c, s, t, ones[t], OP[t], sst[t], n)
    osm(True, r0=scr[t], r1=ones[t], r2=sst[t], i0=n, i1=2, i2=f32(-1.0))           # sst row 0 = -1
    osm(True, r0=scr[t], r1=ones[t], r2=sl[t], i0=r, i1=2, i2=f32(-2.0 * ns))       # sl row 0 = -2·ns
    rsc(r0=c2s[t], r1=ones[t], r2=sl[t], i0=r, i1=2)
    for j in range(ns):                                                               # (M, M) per slot
        rsc(r0=mrep[t], o0=4 * r * j, r1=ones[t], r2=sx[t], i0=r, i1=2)
    osm(False, r0=scr[t], r1=mrep[t], r2=MS[t], i0=n, i1=2, i2=f32(1.0))            # c_j; l_j·c_j + 2
    # L = Σ (l_j·c_j + 2) - 2·ns rounded once: each f32 term as f16 hi + lo, summed in f32
    rsc(r0=hl[t], r1=ones[t], r2=MS[t], o2=4 * n, i0=n, i1=2)                        # hi
    rsc(r0=scr[t], r1=hl[t], r2=sst[t], i0=n, i1=2)                                  # -hi
    rsc(isa.F_ADD, r0=hl[t], o0=4 * n, r1=ones[t], r2=MS[t], o2=4 * n, r3=scr[t], i0=n, i1=2)   # lo
    k(op=isa.ADD, dtype=F16, r0=l2[t], r1=c2s[t], r2=hl[t], i0=2 * ns, i1=2 * r, i2=4 * r)
    osm(True, r0=scr[t], r1=l2[t], r2=sl[t], i0=r, i1=2, i2=f32(1.0))               # L to f32
    # O = Σ c_j·O_j / L: the sum's rounding error (lo) is added back in the division
    rsc(r0=OP[t], r1=OP[t], r2=MS[t], o2=8 * n, i0=n, i1=d)                          # c_j·O_j
    k(op=isa.ADD, dtype=F16, r0=out[t], r1=OP[t], r2=OP[t], o2=2 * d * r, i0=ns - 1, i1=d * r, i2=2 * d * r)
    rsc(r0=lo[t], r1=out[t], r2=sst[t], i0=r, i1=d)                                  # -sum
    k(op=isa.ADD, dtype=F16, r0=lo[t], r1=lo[t], r2=OP[t], i0=ns, i1=d * r, i2=2 * d * r)
    rsc(isa.F_RECIP, r0=lo[t], r1=lo[t], r2=sl[t], i0=r, i1=d)
    rsc(isa.F_RECIP | isa.F_ADD, r0=out[t], r1=out[t], r2=sl[t], r3=lo[t], i0=r, i1=d)
    for b in (scr, ones, mrep, hl, sst, sx, sl, c2s, l2, lo, X, MS, OP):
        bld.reads(b[t], s)
    return out


def cost(t, R: int, ns: int, d: int) -> int:
    """Cycles the split tail, the partial exchange and the merge add (per the
    kernels above, on the largest block)."""
    r = int(pad(-(-R // ns), 2))
    n = ns * r
    recv = ns * r * (2 * d + 12)
    exch = t.exchange_phase_cycles + -(-max(recv, R * (2 * d + 12)) // t.exchange_bytes_per_cycle)
    osm, rs = t.online_softmax_cycles, t.rowscale_cycles
    tail = osm(R, 2) + rs(R, 2, 0, 0)
    merge = (osm(r, 2 * ns) + 3 * osm(n, 2) + 3 * osm(r, 2) + (ns + 1) * rs(r, 2, 0, 0) + 2 * rs(n, 2, 0, 0)
             + rs(n, 2, 1, 0) + t.add_cycles(2 * r, 2 * ns) + rs(n, d, 0, 0)
             + t.add_cycles(d * r, ns - 1) + t.add_cycles(d * r, ns) + rs(r, d, 0, 0) + rs(r, d, 0, 1)
             + rs(r, d, 1, 1))
    return int(tail + exch + merge + 2 * t.sync_cycles)

"""Ring pieces in 2-D units read in place (policy.ring_units, Grid.inplace 3; plan/ring.py
unit_pieces prices them).

Why: pieces read in place must be whole AMP channel groups (isa.F_SEG_B), and cut along
one axis they are coarse: fc1's 288 x 48 block at 27 layers is 3 column groups or 9
panels for 4 tiles. A unit here is one (in-channel group and panel) x (out-channel group)
block, qk x qn (32 x 16: fc1's block is 9 x 3 = 27 units), the vertex's weight-pointer
granularity (PopLibs ConvPartial1x1Out, compiler/costs/amp.py), so pieces come as even
as the units allow (7, 7, 7, 6) and the MATMUL reads b as rectangles (isa.F_SEG_2D).

A block's units are taken in column-major order (down a unit column, then the next) and
cut into s = min(gm, U) runs, piece p = units [p·U//s, (p+1)·U//s), held (as in
expand/ring.py) on grid row (p + d) mod s by replica d < Grid.copies. A piece is stored
unit after unit in that order, so its units in one unit column are one contiguous strip:
a [rows, qn] b operand in b's own order (micro-panels stack panel after panel, rows row
after row; only a column's last unit may be short, at the block's k edge). Each grid
tile's MATMUL then reads, per unit column, its own strips where they live (relocated per
Repeat iteration) and the runs it does not hold from one operand buffer, each run filled
by one transfer per source piece (a contiguous strip on the holder; the same bytes to
every receiver, so a multicast under policy.broadcast_sends). No COPY.
"""
from __future__ import annotations

import numpy as np

from .. import isa
from ..plan.homes import panel_elems
from ..plan.matmul import word_elems
from ..plan.ring import in_place_quantum, k_quantum
from ..target import DTYPE_BYTES
from .layout import pad
from .tilegraph import concat


def _units(starts, lens, q):
    """Unit starts (tensor coordinates) of blocks (starts, lens) cut every q, and each
    block's first unit and unit count."""
    cnt = -(-lens // q)
    first = np.cumsum(cnt) - cnt
    blk = np.repeat(np.arange(len(starts)), cnt)
    return starts[blk] + (np.arange(cnt.sum()) - first[blk]) * q, first, cnt, blk


def unit_home(c, name: str, stream: int, grid, count: int, pool: list) -> None:
    """Weight `name`'s ring home in 2-D units: listed in `pool` for expand/ring.py
    pooled_homes (one region-1 request per tile and member count), the unit grid as the
    home layout's cells, stored on each tile in (replica, column-major unit) order."""
    t = c.g.tensors[name]
    P = panel_elems(c.t, t.dtype) if name in c.panels else 0
    if P:
        c.sent_in_panels(name, P)
    K, N = t.shape
    a = next(c.g.tensors[op.inputs[0]].dtype for op in c.g.ops if op.kind == "matmul" and op.inputs[1] == name)
    amp = c.t.amp_dtype(t.dtype, a)
    qk = k_quantum(c.t, amp, P)
    qn = in_place_quantum(1 if P else word_elems(t.dtype), c.t.amp_out_group[amp])
    ks, ns = np.arange(0, K, grid.kb), np.arange(0, N, grid.nb)
    rs, rfirst, rcount, l_of = _units(ks, np.diff(np.append(ks, K)), qk)
    cs, cfirst, ccount, j_of = _units(ns, np.diff(np.append(ns, N)), qn)
    uk = np.arange(len(rs)) - rfirst[l_of]
    un = np.arange(len(cs)) - cfirst[j_of]
    Uk = rcount[l_of][:, None]
    lin = un[None, :] * Uk + uk[:, None]                         # column-major within its block
    U = Uk * ccount[j_of][None, :]
    s = np.minimum(grid.gm, U)
    piece = ((lin + 1) * s - 1) // U                             # p with p·U//s <= lin < (p+1)·U//s
    gn, gk = len(ns), len(ks)
    tiles = [((((piece + d) % s) * gn + j_of[None, :]) * gk + l_of[:, None] + grid.rot) % c.t.tiles
             for d in range(max(1, grid.copies))]
    order = np.argsort(lin.ravel(), kind="stable")               # each tile: its units in piece order
    c.ring_units[name] = dict(qk=qk, qn=qn, rfirst=rfirst, rcount=rcount, cfirst=cfirst, ccount=ccount)
    pool.append((name, stream, grid, count, rs, cs, tiles, P, piece, s, order))


def in_place_units(c, op, grid, gt, x: int):
    """Grid `grid` of matmul `op` read in 2-D units (Grid.inplace 3): per grid tile, its
    b as rectangles (one unit column's run each): its own strips where they live, the
    others gathered in exchange step x into one operand buffer. Returns the buffer's
    request per tile id (-1: none) and the segments (tile, start, req, off, len (columns),
    reloc, row, col, rows), in table order per tile."""
    name = op.inputs[1]
    u, reps = c.ring_units[name], c.ring_reps[name]
    eb, T, C = DTYPE_BYTES[c.g.tensors[name].dtype], c.t.tiles, len(reps)
    qk, qn = u["qk"], u["qn"]
    recs, size = [], np.zeros(len(gt.tile), np.int64)
    shape = np.stack([u["rcount"][gt.l], u["ccount"][gt.j], gt.klen[gt.l], gt.nlen[gt.j]], 1)
    for i in range(grid.gm):
        mine_i = gt.i == i
        for Uk, Un, kl, nl in np.unique(shape[mine_i], axis=0).tolist():
            sel = np.flatnonzero(mine_i & (shape == [Uk, Un, kl, nl]).all(1))
            U = Uk * Un
            s = min(grid.gm, U)
            own = {p for p in range(s) if i < s and (i - p) % s < C}
            for n_ in range(Un):
                lin = n_ * Uk + np.arange(Uk)
                piece = ((lin + 1) * s - 1) // U
                key = [int(p) if p in own else -1 for p in piece]            # own: by piece; else one run
                cols = min(qn, nl - n_ * qn)
                k0 = 0
                while k0 < Uk:
                    k1 = k0 + 1
                    while k1 < Uk and key[k1] == key[k0]:
                        k1 += 1
                    r0, r1 = k0 * qk, min(k1 * qk, kl)
                    rec = dict(sel=sel, i=i, un=n_, uk0=k0, uk1=k1, row=r0, rows=r1 - r0, col=n_ * qn, cols=cols,
                               piece=key[k0], pieces=piece[k0:k1], s=s)
                    if key[k0] < 0:
                        rec["off"] = size[sel].copy()
                        size[sel] += pad((r1 - r0) * cols * eb, 16)
                    recs.append(rec)
                    k0 = k1
    buf = np.full(T, -1, np.int64)
    has = size > 0
    buf[gt.tile[has]] = c.bld.alloc_rows(f"{op.outputs[0]}.b", gt.tile[has], size[has],
                                         *isa.OPERANDS[isa.MATMUL]["b"], x)
    segs = []
    for k, r in enumerate(recs):
        sel = r["sel"]
        tiles, l, j = gt.tile[sel], gt.l[sel], gt.j[sel]
        a, b = u["rfirst"][l], u["cfirst"][j] + r["un"]                  # the units' cells in the layout
        common = dict(tile=tiles, start=np.full(len(sel), k), len=np.full(len(sel), r["cols"]),
                      row=np.full(len(sel), r["row"]), col=np.full(len(sel), r["col"]), rows=np.full(len(sel), r["rows"]))
        if r["piece"] >= 0:
            lay = reps[(r["i"] - r["piece"]) % r["s"]]                     # the replica on this row
            at = (a + r["uk0"], b)
            segs.append(dict(common, req=lay.req[at], off=lay.off[at], reloc=lay.istride[at]))
            continue
        p_run = r["pieces"]
        k0 = 0
        while k0 < len(p_run):                                            # one transfer per source piece
            k1 = k0 + int(np.sum(p_run[k0:] == p_run[k0]))
            p = int(p_run[k0])
            lay = reps[(r["i"] - p) % C]
            at = (a + r["uk0"] + k0, b)
            nbytes = (min((r["uk0"] + k1) * qk, r["row"] + r["rows"]) - (r["uk0"] + k0) * qk) * r["cols"] * eb
            c.bld.add("xfer", step=x, src=lay.tile[at], dst=tiles, sreq=lay.req[at], soff=lay.off[at],
                      dreq=buf[tiles], doff=r["off"] + k0 * qk * r["cols"] * eb, s_row_bytes=nbytes, s_rows=1,
                      s_stride=0, d_row_bytes=nbytes, d_rows=1, d_stride=0, reloc=lay.istride[at])
            c.bld.reads(lay.req[at], x)
            k0 = k1
        segs.append(dict(common, req=buf[tiles], off=r["off"], reloc=np.zeros(len(sel), np.int64)))
    return buf, concat(segs)


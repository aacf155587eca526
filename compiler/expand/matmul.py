"""Matmuls: a grid's tiles gather their operand blocks and run MATMUL, in one or more
serial row passes, reducing k-split partials; and weight-stationary weights, resident
where their matmul reads them (plan/matmul.py defines the grids)."""
from __future__ import annotations

import numpy as np

from .. import isa
from ..plan.homes import panel_elems
from ..plan.matmul import OUT_BYTES, Grid, partial_bytes, reduce_rows, stationary_weights
from ..plan.relay import relay_pieces
from ..target import DTYPE_BYTES, STANDARD
from .layout import Layout, gather, host_rects, pad
from .ring import gather_b, in_place, local_pieces
from .ring2d import in_place_units
from .tilegraph import END

F16 = isa.DTYPES["f16"]


class GridTiles:
    """A matmul grid's blocks along groups, k and n (starts, lengths), and its tiles
    (q, i, j, l) for `row_blocks` row blocks, numbered as every pass numbers them:
    tile = ((q·gm + i)·gn + j)·gk + l, from tile grid.rot on (mod `tiles`)."""

    def __init__(self, op, grid: Grid, row_blocks: int, tiles: int):
        self.groups = np.asarray(op.attr("groups", ((0, 0, 0, 0, 0, 0),)), np.int64)
        self.tb = bool(op.attr("transpose_b", False))
        dims = ((len(self.groups), grid.gb), (op.attr("k"), grid.kb), (op.attr("n"), grid.nb))
        self.gs, self.ks, self.ns = (np.arange(0, d, b) for d, b in dims)
        self.glen, self.klen, self.nlen = (np.diff(np.append(s, d)) for s, (d, _) in
                                           zip((self.gs, self.ks, self.ns), dims))
        self.q, self.i, self.j, self.l = (x.ravel() for x in np.meshgrid(
            *map(np.arange, (len(self.gs), row_blocks, len(self.ns), len(self.ks))), indexing="ij"))
        self.tile = ((self.q * grid.gm + self.i) * len(self.ns) + self.j) * len(self.ks) + self.l
        self.tile = (self.tile + grid.rot) % tiles

    def b_rect(self, gi):
        """B's rectangle (row, rows, col, cols) that each tile reads, for group gi of each."""
        br, bc, ks, kl = self.groups[gi, 2], self.groups[gi, 3], self.ks[self.l], self.klen[self.l]
        ns, nl = self.ns[self.j], self.nlen[self.j]
        return (br + ns, nl, bc + ks, kl) if self.tb else (br + ks, kl, bc + ns, nl)


def expand_matmul(c, op, grid: Grid, scale: float):
    """The grid's tiles compute C in grid.sp serial passes over the rows (one is the
    usual case), each pass an exchange of its A blocks and a compute superstep (and a
    reduction with a k-split); B is gathered once, in the first pass, or resident."""
    g, bld = c.g, c.bld
    B = g.tensors[op.inputs[1]]
    M, eb, P = op.attr("m"), DTYPE_BYTES[B.dtype], panel_elems(c.t, B.dtype)
    gt = GridTiles(op, grid, grid.gm, c.t.tiles)
    tile, ng = gt.tile, gt.glen[gt.q]
    sb = pad(gt.klen[gt.l] * gt.nlen[gt.j] * eb, 16)          # per-group stride of the b buffer
    a_lay = relay_operand(c, op.inputs[0], op.outputs[0]) if grid.relay else c.lay[op.inputs[0]]
    x = c.exchange_step()
    T = c.t.tiles
    sb_of = np.zeros(T, np.int64)
    sb_of[tile] = sb
    segs = None
    if c.op in c.resident:      # weight-stationary: b is read in place, member i at + i·stride
        b_blk, off, stride = c.resident[c.op]
        b = (b_blk, off, stride, sb_of)                     # per tile id
    elif grid.ring and grid.inplace:                        # ring pieces read where they live (F_SEG_B)
        first = len(bld.xfer)
        b_blk, segs = in_place_units(c, op, grid, gt, x) if grid.inplace == 3 else in_place(c, op, grid, gt, x, P)
        b = (b_blk, np.zeros(T, np.int64), np.zeros(T, np.int64), sb_of)
        c.may_move(B.name, first, b_blk[tile][b_blk[tile] >= 0], x)
    else:
        b_blk = bld.alloc(f"{op.outputs[0]}.b", tile, ng * sb, *isa.OPERANDS[isa.MATMUL]["b"], x)
        b = (b_blk, np.zeros(T, np.int64), np.zeros(T, np.int64), sb_of)
        first = len(bld.xfer)
        for gl in range(int(gt.glen.max())):                # group gl of every tile's chunk
            has = gl < ng
            # (B_g is [N, K] when transposed: nj rows of kl, exactly the transposed-b operand)
            r0, nr, c0, nc = (v[has] for v in gt.b_rect(np.minimum(gt.gs[gt.q] + gl, len(gt.groups) - 1)))
            if gt.tb and P:                                 # an FP8 activation read as b transposed
                transposed_panels(c, B.name, x, r0, nr, c0, nc, tile[has], b_blk[tile[has]], gl * sb[has], P)
            else:
                gather_b(c, B.name, x, gt.i[has], r0, r0 + nr, c0, c0 + nc, tile[has], b_blk[tile[has]],
                         gl * sb[has], nc * eb, P)            # ring copies: each grid row its sources
        if grid.ring:                                       # ring home: own pieces copied on the tile
            local_pieces(c, first)
        c.may_move(B.name, first, b_blk[tile], x)           # policy.early_gathers (expand/early.py)
    c.exchanged_at[op.outputs[0]] = x
    Mp, cells = -(-M // grid.sp), []
    for p in range(grid.sp):
        rows = min(Mp, M - p * Mp)
        cells += _matmul_pass(c, op, grid, scale, x if p == 0 else c.exchange_step(), p * Mp,
                              np.arange(0, rows, grid.mb), rows, b, a_lay, segs)
    c.lay[op.outputs[0]] = _layout_of_cells(g.tensors[op.outputs[0]], cells)


def transposed_panels(c, name: str, x: int, r0, nr, c0, nc, tiles, req, off, P: int) -> None:
    """B [N, K] row-major (an FP8 activation: attention's K, model.fp8_scores) read as the
    b = B^T [K, N] the AMP loads only in micro-panels along k (isa.panel_order): panel p of
    b is rows [p·P, p·P + h) of b transposed, [N, h] row-major, which is B's rectangle
    [r0, r0 + nr) x [c0 + p·P, c0 + p·P + h) row-major. So each panel is one row-major
    gather of whole rows of h bytes (no byte-wise permutation), panel p at off + p·P·nr."""
    lay = c.lay[name]
    e = lay.ebytes
    for p0 in range(0, int(nc.max()), P):
        has = p0 < nc
        h = np.minimum(nc - p0, P)[has]
        gather(c.bld, lay, x, r0[has], (r0 + nr)[has], (c0 + p0)[has], (c0 + p0)[has] + h, tiles[has],
               req[has], (off + p0 * nr * e)[has], h * e)


def relay_operand(c, name: str, out: str) -> Layout:
    """Operand relay (plan/relay.py): `name`'s whole-row layout spread over idle tiles in
    an exchange superstep of its own, piece 0 of each row read in place (a view of the
    producer's block), the others copied to helper tiles; the layout itself when it is
    not of that kind (plan priced the relay on the same function)."""
    lay = c.lay[name]
    if not lay.full_rows or lay.panel:
        return lay
    got = relay_pieces(lay.rstart, lay.rlen, np.zeros_like(lay.rstart), np.full_like(lay.rstart, lay.cols),
                       lay.tile[:, 0], lay.cols, c.t.tiles)
    if got is None:
        return lay
    cs, tiles = got
    n, s = tiles.shape
    e = lay.ebytes
    widths = np.diff(np.append(cs, lay.cols))
    step = c.exchange_step()
    helpers, w = tiles[:, 1:].ravel(), np.tile(widths[1:], n)
    req_h = c.bld.alloc_rows(f"{name}@{out}", helpers, pad(w * e, 8), 8, STANDARD, step)
    req, off = np.empty((n, s), np.int64), np.zeros((n, s), np.int64)
    req[:, 0], off[:, 0], req[:, 1:] = lay.req[:, 0], lay.off[:, 0], req_h.reshape(n, s - 1)
    r0 = np.repeat(lay.rstart, s - 1)
    c0 = np.tile(cs[1:], n)
    gather(c.bld, lay, step, r0, r0 + 1, c0, c0 + w, helpers, req_h, 0, w * e)
    istride = np.zeros((n, s), np.int64)
    istride[:, 0] = lay.istride[:, 0]
    return Layout(lay.rows, lay.cols, lay.rstart, cs, tiles, req, e, off, istride, name=f"{name}@{out}")


def _matmul_pass(c, op, grid: Grid, scale: float, x: int, r0: int, mstarts, rows: int, b, a_lay: Layout,
                 segs=None):
    """One pass: the output rows [r0, r0 + rows) in row blocks `mstarts` (relative),
    A gathered from `a_lay` in exchange step x; returns the output cells. `segs`: b
    in segments (expand/ring.py in_place) on the tiles they name."""
    g, bld = c.g, c.bld
    A, B = (g.tensors[n] for n in op.inputs)
    ea = DTYPE_BYTES[A.dtype]
    ms = r0 + mstarts
    gt = GridTiles(op, grid, len(ms), c.t.tiles)
    groups, tb, gs, ks, ns, glen = gt.groups, gt.tb, gt.gs, gt.ks, gt.ns, gt.glen
    q, i, j, l, tile = gt.q, gt.i, gt.j, gt.l, gt.tile
    gk = len(ks)
    mlen = np.diff(np.append(ms, r0 + rows))
    ng, mi, kl, nj = glen[q], mlen[i], gt.klen[l], gt.nlen[j]
    b_blk, b_off, b_reloc, sb = (v[tile] for v in b)        # b's request, offset, stride per tile id
    pe = int(partial_bytes(c.policy.f32_partials, gk, c.t.amp_dtype(B.dtype, A.dtype)))   # 4: f32 partials
    # per-group strides inside each tile's buffers, padded to the kernel alignment
    sa, so = pad(mi * kl * ea, 8), pad(mi * nj * pe, 8)
    spec = isa.OPERANDS[isa.MATMUL]
    a_blk = bld.alloc(f"{op.outputs[0]}.a", tile, ng * sa, *spec["a"], x)
    has_b = b_blk >= 0                                      # in place: a tile may receive nothing
    bld.bank.append(np.stack([a_blk[tile], b_blk], 1)[has_b])
    seg_of = np.zeros(c.t.tiles, bool)
    if segs is not None:
        seg_of[segs["tile"]] = True
        bld.bank.append(np.stack([a_blk[segs["tile"]], segs["req"]], 1))
    for gl in range(int(glen.max())):                       # group gl of every tile's chunk
        has = gl < ng
        gi = gs[q[has]] + gl
        ar, ac, tt = groups[gi, 0], groups[gi, 1], tile[has]
        gather(bld, a_lay, x, ar + ms[i[has]], ar + ms[i[has]] + mi[has], ac + ks[l[has]],
               ac + ks[l[has]] + kl[has], tt, a_blk[tt], gl * sa[has], kl[has] * ea)
    s = c.compute_step()
    p_blk = bld.alloc(f"{op.outputs[0]}.p" if gk > 1 else op.outputs[0], tile, ng * so, *spec["out"], s)
    bld.reads(a_blk[tile], s)
    bld.reads(b_blk[has_b], s)
    if segs is not None:
        bld.reads(segs["req"], s)
    cells = []
    sc, sseq = bld.scale_of(scale * np.asarray(A.scale) * np.asarray(B.scale))   # per layer: a table
    dt2 = 0 if A.dtype == B.dtype else isa.DTYPES[A.dtype]          # 0: same as b's
    flags = isa.F_PANEL_B if panel_elems(c.t, B.dtype) else isa.F_TRANSPOSE_B if tb else 0
    flags |= isa.F_F32_OUT if pe == 4 else 0
    for gl in range(int(glen.max())):
        has = gl < ng
        tt = tile[has]
        k0 = bld.nkern
        seg_flags = isa.F_SEG_B | {2: isa.F_SEG_K, 3: isa.F_SEG_2D}.get(grid.inplace, 0)
        c.kernel(step=s, tile=tt, op=isa.MATMUL,
                 dtype=isa.DTYPES[B.dtype] | dt2 << 8 | (flags | np.where(seg_of[tt], seg_flags, 0)) << 16,
                 r0=a_blk[tt], o0=gl * sa[has], r1=b_blk[has], o1=(gl * sb + b_off)[has], r2=p_blk[tt],
                 o2=gl * so[has], i0=mi[has], i1=kl[has], i2=nj[has], scale=sc, sseq=sseq,
                 reloc=b_reloc[has])
        if segs is not None:                                # ungrouped (a ring): one kernel per tile
            kern = np.full(c.t.tiles, -1, np.int64)
            kern[tt] = k0 + np.arange(len(tt))
            o = np.lexsort((segs["start"], kern[segs["tile"]]))
            rect = {f: segs[f][o] for f in ("row", "col", "rows") if f in segs}    # F_SEG_2D rectangles
            bld.add("bseg", kern=kern[segs["tile"]][o], req=segs["req"][o], off=segs["off"][o],
                    len=segs["len"][o], reloc=segs["reloc"][o], **rect)
        if gk == 1:
            gi = gs[q[has]] + gl
            cells.append((groups[gi, 4] + ms[i[has]], groups[gi, 5] + ns[j[has]], tt, p_blk[tt], gl * so[has]))
    if gk > 1:
        cells = _reduce(c, op, grid, tile, q, i, j, l, gs, ms, ns, ng, mi, nj, so, p_blk, groups, glen, pe)
    elif op.attr("normalise"):        # policy.deferred_norm: the output rows / their a rows' sums, in place
        vec, s4 = _row_sums(c, op, x, tile, np.ones(len(tile), bool), q, i, gs, ms, ng, mi, groups, glen)
        _divide(c, s, tile, np.ones(len(tile), bool), p_blk, so, vec, s4, ng, mi, nj, glen)
    return cells


def _row_sums(c, op, x, tile, red, q, i, gs, ms, ng, rows, groups, glen, r0=0):
    """policy.deferred_norm: the f32 sums of the a rows each finishing tile's output rows
    divide by (a deferred SOFTMAX wrote them beside its rows, expand/graph.py), gathered in
    exchange step x into one buffer a tile, group gl's at gl·s4. Returns (request per tile
    id, s4)."""
    s4 = pad(rows * 4, 8)
    t = tile[red]
    vec = c.bld.alloc(f"{op.outputs[0]}.sums", t, (ng * s4)[red], 8, STANDARD, x)
    for gl in range(int(glen.max())):
        sel = red & (gl < ng)
        ar = groups[gs[q[sel]] + gl, 0] + (ms[i] + r0)[sel]      # the a rows of group gl's output rows
        gather(c.bld, c.sums[op.inputs[0]], x, ar, ar + rows[sel], 0, 1, tile[sel], vec[tile[sel]],
               (gl * s4)[sel], 4)
    return vec, s4


def _divide(c, s, tile, red, out, so, vec, s4, ng, rows, nj, glen):
    """ROWSCALE F_RECIP in compute step s: each group's f16 output rows (at gl·so of `out`)
    times 1 / their sums (at gl·s4 of `vec`), in place, after the kernels that wrote them."""
    c.bld.reads(vec[tile[red]], s)
    for gl in range(int(glen.max())):
        sel = red & (gl < ng)
        tt = tile[sel]
        c.kernel(step=s, tile=tt, op=isa.ROWSCALE, dtype=F16 | isa.F_RECIP << 16, r0=out[tt], o0=(gl * so)[sel],
                 r1=out[tt], o1=(gl * so)[sel], r2=vec[tt], o2=(gl * s4)[sel], i0=rows[sel], i1=nj[sel])


def resident_stationary(g, resident) -> set:
    """The weights kept where their matmuls (`resident`, op indices) read them."""
    return stationary_weights(g) & {g.ops[n].inputs[1] for n in resident}


def resident_blocks(g, stationary, strategy: dict, T: int):
    """The stationary weights' blocks, (op, B, tile, offset, r0, nr, c0, nc) each, one after
    another on their tiles, and every tile's bytes of them (a member's, before the count)."""
    parts, used = [], np.zeros(T, np.int64)
    for n, op in enumerate(g.ops):
        if op.kind == "matmul" and op.inputs[1] in stationary:
            B = g.tensors[op.inputs[1]]
            gt = GridTiles(op, strategy[n], strategy[n].gm, T)     # ungrouped: group 0 only
            tile, (r0, nr, c0, nc) = gt.tile, gt.b_rect(np.zeros_like(gt.tile))
            off = used[tile].copy()
            used[tile] += pad(nr * nc * DTYPE_BYTES[B.dtype], 16)
            parts.append((n, B, tile, off, r0, nr, c0, nc))
    return parts, used


def resident_weights(c, strategy: dict):
    """Weight-stationary: every tile's blocks of the stationary weights, resident where
    their matmuls read them (replicated over tiles that share a block), written once by
    the host; no exchange moves them. One request per tile holds them all, member i of
    every weight in member i of the request: a bank-separated sequence owns each memory
    element it touches, so one request wastes at most one element pair, not one per
    weight. Member i is read in place through an operand address the REPEAT relocates."""
    T, count = c.t.tiles, c.count
    parts, used = resident_blocks(c.g, c.stationary, strategy, T)
    if not parts:
        return
    align, region = isa.OPERANDS[isa.MATMUL]["b"]
    has = np.flatnonzero(used)
    stride = pad(used, align) * (count > 1)
    req = np.full(T, -1, np.int64)
    req[has] = c.bld.alloc_rows("weights.resident", has, used[has], align, region, 0, END, count, stride[has])
    for n, B, tile, off, r0, nr, c0, nc in parts:
        P = panel_elems(c.t, B.dtype)          # block-major: the block contiguous, micro-panels inside
        if P:
            c.sent_in_panels(B.name, P)
        host_rects(c.bld, c.stationary[B.name], B.shape, DTYPE_BYTES[B.dtype], count, P, r0, r0 + nr, c0, c0 + nc,
                   req[tile], off, stride[tile], r0, c0, nc)
        o = np.zeros(T, np.int64)
        o[tile] = off
        c.resident[n] = (req, o, stride)


def _reduce(c, op, grid, tile, q, i, j, l, gs, ms, ns, ng, mi, nj, sp, p_blk, groups, glen, pe=OUT_BYTES):
    """k-split: tile l of each block sums rows [l·rr, (l+1)·rr) of the gk partials, of pe
    bytes an element (4: f32 partials, received as f32 and summed by an ADD of f32
    sources that rounds once to f16, policy.f32_partials)."""
    bld, gk, gn = c.bld, grid.gk, len(ns)
    gm = grid.gm                                             # per pass: a short last pass has fewer
    rr = reduce_rows(grid.mb, gk, grid.nb, op.attr("n"))
    r0 = l * rr
    rows = np.clip(mi - r0, 0, rr)
    red = rows > 0
    nbytes = rows * nj * pe
    slot = pad(nbytes, 8)                                    # received slices start 8-byte aligned
    sc = pad(rows * nj * OUT_BYTES, 8)
    x = c.exchange_step()
    t = tile[red]
    recv = bld.alloc(f"{op.outputs[0]}.recv", t, (ng * (gk - 1) * slot)[red], 8, STANDARD, x)
    bld.reads(p_blk[tile], x)
    for gl in range(int(glen.max())):
        for d in range(1, gk):                               # peer l' = (l + d) mod gk, slot d - 1
            sel = red & (gl < ng)
            peer = (((q * gm + i) * gn + j) * gk + (l + d) % gk + grid.rot) % c.t.tiles
            bld.add("xfer", step=x, src=peer[sel], dst=tile[sel], sreq=p_blk[peer[sel]],
                    soff=(gl * sp + r0 * nj * pe)[sel], dreq=recv[tile[sel]],
                    doff=((gl * (gk - 1) + d - 1) * slot)[sel], s_row_bytes=nbytes[sel], s_rows=1, s_stride=0,
                    d_row_bytes=nbytes[sel], d_rows=1, d_stride=0)
    norm = op.attr("normalise")              # policy.deferred_norm: the row sums ride this exchange
    if norm:
        vec, s4 = _row_sums(c, op, x, tile, red, q, i, gs, ms, ng, rows, groups, glen, r0)
    s = c.compute_step()
    out = bld.alloc(op.outputs[0], t, (ng * sc)[red], 8, STANDARD, s)
    bld.reads(recv[t], s)
    bld.reads(p_blk[t], s)
    cells = []
    for gl in range(int(glen.max())):
        sel = red & (gl < ng)
        tt = tile[sel]
        c.kernel(step=s, tile=tt, op=isa.ADD, dtype=F16 | (isa.DTYPES["f32"] << 8 if pe == 4 else 0),
                 r0=out[tt], o0=(gl * sc)[sel], r1=p_blk[tt], o1=(gl * sp + r0 * nj * pe)[sel], r2=recv[tt],
                 o2=(gl * (gk - 1) * slot)[sel], i0=gk - 1, i1=(rows * nj)[sel], i2=slot[sel])
        gi = gs[q[sel]] + gl
        cells.append((groups[gi, 4] + ms[i[sel]] + r0[sel], groups[gi, 5] + ns[j[sel]], tt, out[tt],
                      (gl * sc)[sel]))
    if norm:                                 # after every group's ADD (one kernel list a tile, in order)
        _divide(c, s, tile, red, out, sc, vec, s4, ng, rows, nj, glen)
    return cells


def _layout_of_cells(T, cells) -> Layout:
    """The output grid from its blocks (row start, col start, tile, request, offset)."""
    r0, c0, tile, req, off = (np.concatenate([np.asarray(cl[k]) for cl in cells]) for k in range(5))
    rows, cols = T.shape
    rs, cs = np.unique(r0), np.unique(c0)
    a, b = np.searchsorted(rs, r0), np.searchsorted(cs, c0)
    shape = (len(rs), len(cs))
    if len(r0) != shape[0] * shape[1] or len(set(zip(a.tolist(), b.tolist()))) != len(r0):
        raise AssertionError(f"{T.name}: output blocks do not form a grid")
    lay = Layout(rows, cols, rs, cs, np.zeros(shape, np.int64), np.zeros(shape, np.int64), OUT_BYTES,
                 np.zeros(shape, np.int64))
    lay.tile[a, b], lay.req[a, b], lay.off[a, b] = tile, req, off
    return lay

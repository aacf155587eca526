"""Graph -> tile graph: walk the ops in order, keeping each tensor's layout.

Each op first gathers what it needs (one exchange superstep for all its gathers),
then runs its kernels (a compute superstep, shared with the previous op's when no
exchange came between). Inputs and parameters start in their homes: whole rows
spread evenly over the tiles, each tensor rotated to balance the fullest tile
(policy.home_rotation); vectors in replicated 256-byte shards (policy.vector_homes) so that broadcasting them
to every row tile costs no home tile more than a consumer receives.
"""
from __future__ import annotations

import numpy as np

from .. import isa
from ..plan.matmul import OUT_BYTES, Grid, reduce_rows, stationary_weights
from ..target import DTYPE_BYTES, STANDARD, Target
from .layout import Layout, allocate, convert, fill, gather, pad, spread, starts
from .flash import expand_flash
from .tilegraph import END, Builder, TileGraph

F16 = isa.DTYPES["f16"]
VECTOR_SHARD = 256   # bytes per shard of a vector home


class Ctx:
    def __init__(self, graph, target: Target, policy):
        self.g, self.t, self.policy = graph, target, policy
        self.bld = Builder(target.tiles)
        self.kinds: list[str] = []
        self.lay: dict[str, Layout] = {}
        self.replicas: dict[str, list[Layout]] = {}   # vector homes: one layout per replica
        self.exchanged_at: dict[str, int] = {}        # matmul output -> its operand exchange step
        self.op = -1                                   # index of the op being expanded
        self.count, self.seq = 1, set()                # Repeat count and its sequences
        self.stationary: dict[str, int] = {}           # weight -> host stream: resident where read
        self.resident: dict[int, tuple] = {}           # matmul op -> its b blocks in the resident request
        self.step_op: list[int] = []                   # op that opened each superstep

    # supersteps ---------------------------------------------------------------
    def exchange_step(self) -> int:
        self.kinds.append("exchange")
        self.step_op.append(self.op)
        return len(self.kinds)

    def compute_step(self) -> int:
        if not self.kinds or self.kinds[-1] != "compute":
            self.kinds.append("compute")
            self.step_op.append(self.op)
        return len(self.kinds)

    def kernel(self, **cols):
        self.bld.add("kern", **cols)

    # homes --------------------------------------------------------------------
    def home(self, name: str, stream: int, rot: int, count: int = 1, resident: bool = False):
        """Whole rows over all tiles from tile `rot`; a sequence keeps its `count`
        members together in each home block, `istride` apart."""
        t = self.g.tensors[name]
        rows, cols = t.shape
        if rows == 1 and self.policy.vector_homes and t.kind == "param":
            return self.vector_home(name, stream, rot, count)
        rs = starts(rows, self.t.tiles)
        tiles = (spread(len(rs), self.t.tiles) + rot) % self.t.tiles
        self.lay[name] = self._home_layout(name, stream, rs, [0], tiles, count, resident)

    def _home_layout(self, name, stream, rs, cs, tiles, count, resident) -> Layout:
        t = self.g.tensors[name]
        rows, cols = t.shape
        e = DTYPE_BYTES[t.dtype]
        lay = allocate(self.bld, f"{name}.home", rows, cols, rs, cs, tiles, e, 16, STANDARD, 0,
                       END if resident else 1, count)
        A, B, r, k = _blocks(lay)
        i = np.arange(count)[:, None]                  # every member of every block, one call
        self.bld.add("hin", stream=stream, host_off=(i * t.nbytes + (lay.rstart[A] * cols + lay.cstart[B]) * e).ravel(),
                     req=np.tile(lay.req[A, B], count), off=(i * lay.istride[A, B]).ravel(),
                     row_bytes=np.tile(k * e, count), rows=np.tile(r, count), host_stride=cols * e,
                     tile_stride=np.tile(k * e, count))
        return lay

    def vector_home(self, name: str, stream: int, rot: int, count: int):
        """A [1, C] parameter in shards of ~VECTOR_SHARD bytes, replicated so that each
        shard tile serves about as many bytes as a row tile receives (half the tiles
        consume it; each needs all S shards: R = ⌈(T/2)·shard / vector⌉ replicas)."""
        t, T = self.g.tensors[name], self.t.tiles
        cols, e = t.shape[1], DTYPE_BYTES[t.dtype]
        cs = np.arange(0, cols, max(2, VECTOR_SHARD // e))
        S = len(cs)
        R = int(min(max(1, -(-(T // 2) * VECTOR_SHARD // t.nbytes)), max(1, T // S)))
        self.replicas[name] = [
            self._home_layout(name, stream, [0], cs, (rot + (r * S + np.arange(S)) * T // (R * S)) % T, count, True)
            for r in range(R)]
        self.lay[name] = self.replicas[name][0]

    def gather_vector(self, name: str, step: int, tiles, req, off, c0=0, c1=None):
        """Columns [c0, c1) (default: all) of vector `name` into (req, off) on each of
        `tiles`, each from replica (its position mod R)."""
        reps = self.replicas.get(name, [self.lay[name]])
        t = self.g.tensors[name]
        e = DTYPE_BYTES[t.dtype]
        c1 = t.shape[1] if c1 is None else c1
        tiles, req, off, c0, c1 = np.broadcast_arrays(*(np.asarray(v) for v in (tiles, req, off, c0, c1)))
        for r, lay in enumerate(reps):
            sel = np.arange(len(tiles)) % len(reps) == r
            gather(self.bld, lay, step, 0, 1, c0[sel], c1[sel], tiles[sel], req[sel], off[sel],
                   (c1[sel] - c0[sel]) * e)


def expand_matmul(c: Ctx, op, grid: Grid, scale: float):
    """The grid's tiles compute C in grid.sp serial passes over the rows (one is the
    usual case), each pass an exchange of its A blocks and a compute superstep (and a
    reduction with a k-split); B is gathered once, in the first pass, or resident."""
    g, bld = c.g, c.bld
    A, B = (g.tensors[x] for x in op.inputs)
    M, K, N = op.attr("m"), op.attr("k"), op.attr("n")
    groups = np.asarray(op.attr("groups", ((0, 0, 0, 0, 0, 0),)), np.int64)
    tb = bool(op.attr("transpose_b", False))
    eb = DTYPE_BYTES[B.dtype]
    G = len(groups)
    gs, ks, ns = (np.arange(0, d, b) for d, b in ((G, grid.gb), (K, grid.kb), (N, grid.nb)))
    glen, klen, nlen = np.diff(np.append(gs, G)), np.diff(np.append(ks, K)), np.diff(np.append(ns, N))
    q, i, j, l = (x.ravel() for x in np.meshgrid(*map(np.arange, (len(gs), grid.gm, len(ns), len(ks))),
                                                 indexing="ij"))
    tile = ((q * grid.gm + i) * len(ns) + j) * len(ks) + l
    ng, kl, nj = glen[q], klen[l], nlen[j]
    sb = pad(kl * nj * eb, 16)                      # per-group stride of the b buffer
    x = c.exchange_step()
    T = c.t.tiles
    sb_of = np.zeros(T, np.int64)
    sb_of[tile] = sb
    if c.op in c.resident:      # weight-stationary: b is read in place, member i at + i·stride
        b_blk, off, stride = c.resident[c.op]
        b = (b_blk, off, stride, sb_of)                     # per tile id
    else:
        b_blk = bld.alloc(f"{op.outputs[0]}.b", tile, ng * sb, *isa.OPERANDS[isa.MATMUL]["b"], x)
        b = (b_blk, np.zeros(T, np.int64), np.zeros(T, np.int64), sb_of)
        for gl in range(int(glen.max())):                   # group gl of every tile's chunk
            has = gl < ng
            gi = gs[q[has]] + gl
            br, bc, tt = groups[gi, 2], groups[gi, 3], tile[has]
            if tb:   # B_g is [N, K]: the block is nj rows of kl, exactly the transposed-b operand
                gather(bld, c.lay[B.name], x, br + ns[j[has]], br + ns[j[has]] + nj[has], bc + ks[l[has]],
                       bc + ks[l[has]] + kl[has], tt, b_blk[tt], gl * sb[has], kl[has] * eb)
            else:
                gather(bld, c.lay[B.name], x, br + ks[l[has]], br + ks[l[has]] + kl[has], bc + ns[j[has]],
                       bc + ns[j[has]] + nj[has], tt, b_blk[tt], gl * sb[has], nj[has] * eb)
    c.exchanged_at[op.outputs[0]] = x
    Mp, cells = -(-M // grid.sp), []
    for p in range(grid.sp):
        rows = min(Mp, M - p * Mp)
        cells += _matmul_pass(c, op, grid, scale, x if p == 0 else c.exchange_step(), p * Mp,
                              np.arange(0, rows, grid.mb), rows, b)
    c.lay[op.outputs[0]] = _layout_of_cells(g.tensors[op.outputs[0]], cells)


def _matmul_pass(c: Ctx, op, grid: Grid, scale: float, x: int, r0: int, mstarts, rows: int, b):
    """One pass: the output rows [r0, r0 + rows) in row blocks `mstarts` (relative),
    A gathered in exchange step x; returns the output cells."""
    g, bld = c.g, c.bld
    A, B = (g.tensors[n] for n in op.inputs)
    K, N = op.attr("k"), op.attr("n")
    groups = np.asarray(op.attr("groups", ((0, 0, 0, 0, 0, 0),)), np.int64)
    tb = bool(op.attr("transpose_b", False))
    ea = DTYPE_BYTES[A.dtype]
    G = len(groups)
    gs, ks, ns = (np.arange(0, d, bs) for d, bs in ((G, grid.gb), (K, grid.kb), (N, grid.nb)))
    ms = r0 + mstarts
    glen, mlen = np.diff(np.append(gs, G)), np.diff(np.append(ms, r0 + rows))
    klen, nlen = np.diff(np.append(ks, K)), np.diff(np.append(ns, N))
    gm, gn, gk = grid.gm, len(ns), len(ks)
    q, i, j, l = (v.ravel() for v in np.meshgrid(*map(np.arange, (len(gs), len(ms), gn, gk)), indexing="ij"))
    tile = ((q * gm + i) * gn + j) * gk + l
    ng, mi, kl, nj = glen[q], mlen[i], klen[l], nlen[j]
    b_blk, b_off, b_reloc, sb = (v[tile] for v in b)        # b's request, offset, stride per tile id
    # per-group strides inside each tile's buffers, padded to the kernel alignment
    sa, so = pad(mi * kl * ea, 8), pad(mi * nj * OUT_BYTES, 8)
    spec = isa.OPERANDS[isa.MATMUL]
    a_blk = bld.alloc(f"{op.outputs[0]}.a", tile, ng * sa, *spec["a"], x)
    bld.bank.append(np.stack([a_blk[tile], b_blk], 1))
    for gl in range(int(glen.max())):                       # group gl of every tile's chunk
        has = gl < ng
        gi = gs[q[has]] + gl
        ar, ac, tt = groups[gi, 0], groups[gi, 1], tile[has]
        gather(bld, c.lay[A.name], x, ar + ms[i[has]], ar + ms[i[has]] + mi[has], ac + ks[l[has]],
               ac + ks[l[has]] + kl[has], tt, a_blk[tt], gl * sa[has], kl[has] * ea)
    s = c.compute_step()
    p_blk = bld.alloc(f"{op.outputs[0]}.p" if gk > 1 else op.outputs[0], tile, ng * so, *spec["out"], s)
    bld.reads(a_blk[tile], s)
    bld.reads(b_blk, s)
    cells = []
    for gl in range(int(glen.max())):
        has = gl < ng
        tt = tile[has]
        dt2 = 0 if A.dtype == B.dtype else isa.DTYPES[A.dtype]      # 0: same as b's
        c.kernel(step=s, tile=tt, op=isa.MATMUL, dtype=isa.DTYPES[B.dtype] | dt2 << 8
                 | (isa.F_TRANSPOSE_B << 16 if tb else 0),
                 r0=a_blk[tt], o0=gl * sa[has], r1=b_blk[has], o1=(gl * sb + b_off)[has], r2=p_blk[tt],
                 o2=gl * so[has], i0=mi[has], i1=kl[has], i2=nj[has], scale=scale * A.scale * B.scale,
                 reloc=b_reloc[has])
        if gk == 1:
            gi = gs[q[has]] + gl
            cells.append((groups[gi, 4] + ms[i[has]], groups[gi, 5] + ns[j[has]], tt, p_blk[tt], gl * so[has]))
    if gk > 1:
        cells = _reduce(c, op, grid, tile, q, i, j, l, gs, ms, ns, ng, mi, nj, so, p_blk, groups, glen)
    return cells


def _b_blocks(op, grid: Grid):
    """Tile and rectangle (row, rows, col, cols) of B that each tile of an ungrouped
    matmul's grid reads (tiles numbered as expand_matmul numbers them)."""
    K, N = op.attr("k"), op.attr("n")
    (ks, kl), (ns, nl) = ((np.arange(0, d, b), np.diff(np.append(np.arange(0, d, b), d)))
                          for d, b in ((K, grid.kb), (N, grid.nb)))
    i, j, l = (x.ravel() for x in np.meshgrid(*map(np.arange, (grid.gm, len(ns), len(ks))), indexing="ij"))
    _, _, br, bc, _, _ = op.attr("groups", ((0,) * 6,))[0]
    tile = (i * len(ns) + j) * len(ks) + l
    if op.attr("transpose_b", False):
        return tile, (br + ns[j], nl[j], bc + ks[l], kl[l])
    return tile, (br + ks[l], kl[l], bc + ns[j], nl[j])


def resident_weights(c: Ctx, strategy: dict):
    """Weight-stationary: every tile's blocks of the stationary weights, resident where
    their matmuls read them (replicated over tiles that share a block), written once by
    the host; no exchange moves them. One request per tile holds them all, member i of
    every weight in member i of the request: a bank-separated sequence owns each memory
    element it touches, so one request wastes at most one element pair, not one per
    weight. Member i is read in place through an operand address the REPEAT relocates."""
    T, count = c.t.tiles, c.count
    parts, used = [], np.zeros(T, np.int64)
    for n, op in enumerate(c.g.ops):
        if op.kind == "matmul" and op.inputs[1] in c.stationary:
            B = c.g.tensors[op.inputs[1]]
            tile, (r0, nr, c0, nc) = _b_blocks(op, strategy[n])
            off = used[tile].copy()
            used[tile] += pad(nr * nc * DTYPE_BYTES[B.dtype], 16)
            parts.append((n, B, tile, off, r0, nr, c0, nc))
    if not parts:
        return
    align, region = isa.OPERANDS[isa.MATMUL]["b"]
    has = np.flatnonzero(used)
    stride = pad(used, align) * (count > 1)
    req = np.full(T, -1, np.int64)
    req[has] = c.bld.alloc_rows("weights.resident", has, used[has], align, region, 0, END, count, stride[has])
    i = np.arange(count)[:, None]
    for n, B, tile, off, r0, nr, c0, nc in parts:
        e, rep = DTYPE_BYTES[B.dtype], (lambda v: np.broadcast_to(v, (count, len(tile))).ravel())
        c.bld.add("hin", stream=c.stationary[B.name], host_off=(i * B.nbytes + (r0 * B.shape[1] + c0) * e).ravel(),
                  req=rep(req[tile]), off=(i * stride[tile] + off).ravel(), row_bytes=rep(nc * e), rows=rep(nr),
                  host_stride=B.shape[1] * e, tile_stride=rep(nc * e))
        o = np.zeros(T, np.int64)
        o[tile] = off
        c.resident[n] = (req, o, stride)


def _reduce(c: Ctx, op, grid, tile, q, i, j, l, gs, ms, ns, ng, mi, nj, sp, p_blk, groups, glen):
    """k-split: tile l of each block sums rows [l·rr, (l+1)·rr) of the gk partials."""
    bld, gk, gn = c.bld, grid.gk, len(ns)
    gm = grid.gm                                             # per pass: a short last pass has fewer
    rr = reduce_rows(grid.mb, gk)
    r0 = l * rr
    rows = np.clip(mi - r0, 0, rr)
    red = rows > 0
    nbytes = rows * nj * OUT_BYTES
    slot = pad(nbytes, 8)                                    # received slices start 8-byte aligned
    sc = pad(nbytes, 8)
    x = c.exchange_step()
    t = tile[red]
    recv = bld.alloc(f"{op.outputs[0]}.recv", t, (ng * (gk - 1) * slot)[red], 8, STANDARD, x)
    bld.reads(p_blk[tile], x)
    for gl in range(int(glen.max())):
        for d in range(1, gk):                               # peer l' = (l + d) mod gk, slot d - 1
            sel = red & (gl < ng)
            peer = ((q * gm + i) * gn + j) * gk + (l + d) % gk
            bld.add("xfer", step=x, src=peer[sel], dst=tile[sel], sreq=p_blk[peer[sel]],
                    soff=(gl * sp + r0 * nj * OUT_BYTES)[sel], dreq=recv[tile[sel]],
                    doff=((gl * (gk - 1) + d - 1) * slot)[sel], s_row_bytes=nbytes[sel], s_rows=1, s_stride=0,
                    d_row_bytes=nbytes[sel], d_rows=1, d_stride=0)
    s = c.compute_step()
    out = bld.alloc(op.outputs[0], t, (ng * sc)[red], 8, STANDARD, s)
    bld.reads(recv[t], s)
    bld.reads(p_blk[t], s)
    cells = []
    for gl in range(int(glen.max())):
        sel = red & (gl < ng)
        tt = tile[sel]
        c.kernel(step=s, tile=tt, op=isa.ADD, dtype=F16, r0=out[tt], o0=(gl * sc)[sel], r1=p_blk[tt],
                 o1=(gl * sp + r0 * nj * OUT_BYTES)[sel], r2=recv[tt], o2=(gl * (gk - 1) * slot)[sel],
                 i0=gk - 1, i1=(rows * nj)[sel], i2=slot[sel])
        gi = gs[q[sel]] + gl
        cells.append((groups[gi, 4] + ms[i[sel]] + r0[sel], groups[gi, 5] + ns[j[sel]], tt, out[tt],
                      (gl * sc)[sel]))
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


def _blocks(lay: Layout):
    """Every block of a layout as flat arrays (row block, col block, rows, cols)."""
    A, B = (x.ravel() for x in np.meshgrid(np.arange(len(lay.rstart)), np.arange(len(lay.cstart)),
                                          indexing="ij"))
    return A, B, lay.rlen[A], lay.clen[B]


def _like(c: Ctx, name: str, lay: Layout, step: int, ebytes: int = OUT_BYTES) -> Layout:
    """A fresh layout with the same blocks on the same tiles."""
    return allocate(c.bld, name, lay.rows, lay.cols, lay.rstart, lay.cstart, lay.tile, ebytes,
                    8, STANDARD, step)


def expand_elementwise(c: Ctx, op):
    """GELU, or a cast to FP8 with the output tensor's scale, over the producer's blocks,
    in its layout."""
    src = c.lay[op.inputs[0]]
    y = c.g.tensors[op.outputs[0]]
    s = c.compute_step()
    out = _like(c, op.outputs[0], src, s, DTYPE_BYTES[y.dtype])
    A, B, r, k = _blocks(src)
    if op.kind == "cast":
        c.kernel(step=s, tile=src.tile[A, B], op=isa.CAST, dtype=isa.DTYPES[y.dtype] | F16 << 8,
                 r0=out.req[A, B], r1=src.req[A, B], o1=src.off[A, B], i0=r * k, scale=y.scale)
    else:
        flags = isa.F_ERF if op.attr("approx", "tanh") == "erf" else 0
        c.kernel(step=s, tile=src.tile[A, B], op=isa.GELU, dtype=F16 | flags << 16, r0=out.req[A, B],
                 r1=src.req[A, B], o1=src.off[A, B], i0=r * k)
    c.bld.reads(src, s)
    c.lay[op.outputs[0]] = out


def expand_bias(c: Ctx, op):
    """y = x + b over x's blocks; each block's slice of the bias row is gathered in the
    producer matmul's operand exchange when there is one (no superstep of its own)."""
    x, bname = c.lay[op.inputs[0]], op.inputs[1]
    A, B, r, k = _blocks(x)
    tiles = x.tile[A, B]
    step = c.exchanged_at.get(op.inputs[0]) or c.exchange_step()
    buf = c.bld.alloc_rows(f"{op.outputs[0]}.bias", tiles, pad(k * 2, 8), 8, STANDARD, step)
    c.gather_vector(bname, step, tiles, buf, 0, x.cstart[B], x.cstart[B] + k)
    s = c.compute_step()
    out = _like(c, op.outputs[0], x, s)
    c.kernel(step=s, tile=tiles, op=isa.BIAS, dtype=F16, r0=out.req[A, B], r1=x.req[A, B], o1=x.off[A, B],
             r2=buf, i0=r, i1=k)
    c.bld.reads(x, s)
    c.bld.reads(buf, s)
    c.lay[op.outputs[0]] = out


def _same_grid(a: Layout, b: Layout) -> bool:
    return (np.array_equal(a.rstart, b.rstart) and np.array_equal(a.cstart, b.cstart)
            and np.array_equal(a.tile, b.tile))


def expand_add(c: Ctx, op):
    """Residual add; the second operand is converted to the first's layout if needed."""
    x, y = (c.lay[n] for n in op.inputs)
    if not _same_grid(x, y):
        y = convert(c.bld, y, f"{op.inputs[1]}@{op.outputs[0]}", x.rstart, x.cstart, x.tile,
                    c.exchange_step(), 8, STANDARD)
    s = c.compute_step()
    out = _like(c, op.outputs[0], x, s)
    A, B, r, k = _blocks(x)
    c.kernel(step=s, tile=x.tile[A, B], op=isa.ADD, dtype=F16, r0=out.req[A, B], r1=x.req[A, B],
             o1=x.off[A, B], r2=y.req[A, B], o2=y.off[A, B], i0=1, i1=r * k, i2=0)
    c.bld.reads(x, s)
    c.bld.reads(y, s)
    c.lay[op.outputs[0]] = out


def _rows_layout(c: Ctx, name: str, x: Layout, step_of):
    """x with whole rows per block (converted over all tiles when split by columns)."""
    if x.full_rows:
        return x
    rs = starts(x.rows, c.t.tiles)
    return convert(c.bld, x, f"{name}.rows", rs, [0], spread(len(rs), c.t.tiles), step_of(), 8, STANDARD)


def expand_rowwise(c: Ctx, op):
    """LayerNorm and softmax: whole rows per tile; LayerNorm's gamma and beta gathered
    next to every block in the same exchange."""
    x = c.lay[op.inputs[0]]
    xs = []

    def step_of():   # one exchange superstep for the conversion and the parameters, made on demand
        if not xs:
            xs.append(c.exchange_step())
        return xs[0]

    x = _rows_layout(c, op.outputs[0], x, step_of)
    A, B, r, k = _blocks(x)
    tiles = x.tile[A, B]
    if op.kind == "layernorm":
        C = x.cols
        gb = c.bld.alloc_rows(f"{op.outputs[0]}.gamma_beta", tiles, 2 * pad(C * 2, 8), 8, STANDARD, step_of())
        for n, pname in enumerate(op.inputs[1:3]):
            c.gather_vector(pname, step_of(), tiles, gb, n * pad(C * 2, 8))
    s = c.compute_step()
    out = _like(c, op.outputs[0], x, s)
    if op.kind == "layernorm":
        c.kernel(step=s, tile=tiles, op=isa.LAYERNORM, dtype=F16, r0=out.req[A, B], r1=x.req[A, B],
                 o1=x.off[A, B], r2=gb, o2=0, r3=gb, o3=pad(C * 2, 8), i0=r, i1=k,
                 i2=isa.f32_bits(op.attr("eps", 1e-6)))
        c.bld.reads(gb, s)
    else:
        c.kernel(step=s, tile=tiles, op=isa.SOFTMAX, dtype=F16, r0=out.req[A, B], r1=x.req[A, B],
                 o1=x.off[A, B], i0=r, i1=k, i2=isa.f32_bits(op.attr("scale", 1.0)), i3=op.attr("valid", 0))
    c.bld.reads(x, s)
    c.lay[op.outputs[0]] = out


def host_out(c: Ctx, name: str, stream: int):
    lay = c.lay[name]
    A, B, r, k = _blocks(lay)
    e = lay.ebytes
    c.bld.add("hout", stream=stream, host_off=(lay.rstart[A] * lay.cols + lay.cstart[B]) * e,
              req=lay.req[A, B], off=lay.off[A, B], row_bytes=k * e, rows=r, host_stride=lay.cols * e,
              tile_stride=k * e)
    c.bld.reads(lay, len(c.kinds) + 1)


def home_rotations(graph, names, seq, count: int, T: int, candidates: int = 64) -> dict[str, int]:
    """Balanced home rotation: whole-row homes put each tensor's bytes on evenly spread
    tiles from its rotation; largest tensors first, each takes the rotation (from
    `candidates` evenly spaced ones) that keeps the fullest tile lowest. A sequence
    counts all its members (they share one rotation)."""
    load = np.zeros(T, np.int64)
    out = {}
    sizes = {}
    for n in names:
        t = graph.tensors[n]
        rows, cols = t.shape
        if rows == 1:
            continue                                   # vectors: replicated shard homes
        rs = starts(rows, T)
        per = np.zeros(T, np.int64)
        per[spread(len(rs), T)] = np.diff(np.append(rs, rows)) * cols * DTYPE_BYTES[t.dtype] * (count if n in seq else 1)
        sizes[n] = per
    for n in sorted(sizes, key=lambda n: (-int(sizes[n].sum()), n)):
        per = sizes[n]
        best = min(range(0, T, max(1, T // candidates)), key=lambda r: (int((load + np.roll(per, r)).max()), r))
        load += np.roll(per, best)
        out[n] = best
    return out


def expand_graph(graph, strategy: dict, target: Target, policy, label: str = "",
                 resident: frozenset = frozenset()) -> TileGraph:
    """With a Repeat, the supersteps emitted here are its body, run `count` times:
    carried outputs are exchanged back into their inputs' homes at the end of each
    iteration, and the graph's output is read from there after the last. With
    `resident` matmuls, weights get no homes of their own: they stay where they are read."""
    c = Ctx(graph, target, policy)
    rep = graph.repeat
    count = rep.count if rep else 1
    seq = set(rep.sequences) if rep else set()
    c.count, c.seq = count, seq
    carried = dict(rep.carried) if rep else {}
    ins = [t.name for t in graph.tensors.values() if t.kind in ("input", "param")]
    still = stationary_weights(graph) & {graph.ops[n].inputs[1] for n in resident}
    c.stationary = {n: k for k, n in enumerate(ins) if n in still}
    homed = [n for n in ins if n not in c.stationary]
    resident_weights(c, strategy)
    rots = home_rotations(graph, homed, seq, count, target.tiles) if policy.home_rotation else {}
    for k, name in enumerate(ins):
        if name in homed:
            c.home(name, k, rots.get(name, 0), count if name in seq else 1,
                   resident=graph.tensors[name].kind == "param" or name in carried.values())
    for n, op in enumerate(graph.ops):
        c.op = n
        if op.kind == "matmul":
            expand_matmul(c, op, strategy[n], op.attr("scale", 1.0))
        elif op.kind in ("gelu", "cast"):
            expand_elementwise(c, op)
        elif op.kind == "add":
            expand_add(c, op)
        elif op.kind == "bias":
            expand_bias(c, op)
        elif op.kind in ("layernorm", "softmax"):
            expand_rowwise(c, op)
        elif op.kind == "flash_attention":
            expand_flash(c, op)
        else:
            raise NotImplementedError(f"expand: op {op.kind!r}")
    if carried:
        x = c.exchange_step()
        for out, inp in carried.items():
            fill(c.bld, c.lay[out], c.lay[inp], x)
            c.lay[out] = c.lay[inp]
    outs = [t.name for t in graph.of_kind("output")]
    for k, name in enumerate(outs):
        host_out(c, name, k)
    tg = c.bld.build(c.kinds, ins, {n: graph.tensors[n].nbytes for n in outs}, label, count)
    tg.step_op = c.step_op
    return tg

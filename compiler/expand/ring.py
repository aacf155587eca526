"""Ring homes (policy.ring_homes, compiler/plan/ring.py): a weight homed on its
matmul's grid, each kb × nb block cut by columns into pieces over the gm tiles that
read it; each use, those tiles pass their pieces to each other in the matmul's operand
exchange and copy their own piece locally.

The home is an ordinary Layout (k blocks × column pieces), so the matmul's B gather
(expand/matmul.py) reads it like any home; `local_pieces` then turns the transfers
that gather emitted from a tile to itself into COPY kernels of the same rows in the
matmul's compute superstep (before its MATMUL: kernels run in the order added)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import isa
from ..plan.homes import panel_elems
from ..plan.matmul import word_elems
from ..plan.ring import in_place_quantum, k_quantum, ring_starts
from ..target import DTYPE_BYTES, STANDARD
from .layout import Layout, gather, host_rects, pad
from .ring2d import unit_home
from .tilegraph import END, concat, take


def ring_weights(graph, strategy: dict, resident) -> dict[str, int]:
    """Weight -> matmul, for the weights a candidate homes on their grid (Grid.ring,
    not kept resident)."""
    return {graph.ops[n].inputs[1]: n for n, gr in strategy.items()
            if getattr(gr, "ring", 0) and n not in resident}


def ring_homes(c, ring: dict, strategy: dict, streams: dict, counts: dict) -> None:
    """Every ring home (ring_home), weight by weight in `ring`'s order; those read in place
    (Grid.inplace) share one request per tile and member count (pooled_homes)."""
    pool = []
    for name, n in ring.items():
        ring_home(c, name, streams[name], strategy[n], counts[name], pool)
    if pool:
        pooled_homes(c, pool)


def ring_home(c, name: str, stream: int, grid, count: int, pool: list | None = None):
    """Weight `name`'s home on matmul n's grid: k blocks × (each n block's pieces),
    piece p of block (j, l) on grid tile (0, p, j, l) (from grid.rot), `count` members
    per piece. Sets c.lay[name]. With grid.copies = C > 1 (ring copies) replica d < C
    holds piece p on grid row (p + d) mod s (s: the block's pieces), one home request
    each, and c.ring_rows[name][i] is the layout grid row i gathers from: each piece
    from the replica on row i when it holds one (a local copy), else from replica
    (i - p) mod C (the receivers of a piece shared between its holders). A grid read in
    place (Grid.inplace) holds its pieces in region 1, cut in whole out-channel groups
    (1), or along k (2: piece p of k block l of n block j on grid tile (0, p, j, l), in
    whole in-channel groups and panels); with a `pool` its blocks are only listed there
    (pooled_homes allocates them)."""
    if grid.inplace == 3:           # 2-D units (expand/ring2d.py)
        return unit_home(c, name, stream, grid, count, pool)
    t = c.g.tensors[name]
    P = panel_elems(c.t, t.dtype) if name in c.panels else 0
    if P:
        c.sent_in_panels(name, P)
    (K, N), q = t.shape, 1 if P else word_elems(t.dtype)
    region = STANDARD
    if grid.inplace:                # read in place: whole channel groups, where 128-bit loads reach
        a = next(c.g.tensors[op.inputs[0]].dtype for op in c.g.ops if op.kind == "matmul" and op.inputs[1] == name)
        amp = c.t.amp_dtype(t.dtype, a)
        q = in_place_quantum(q, c.t.amp_out_group[amp]) if grid.inplace == 1 else k_quantum(c.t, amp, P)
        region = isa.OPERANDS[isa.MATMUL]["b"][1]
    ks, ns = np.arange(0, K, grid.kb), np.arange(0, N, grid.nb)     # the grid's blocks (expand/matmul.py GridTiles)
    rows = grid.inplace == 2                                         # pieces along k (rows), else columns
    cut, whole = (ks, K) if rows else (ns, N)
    cs, js, ps, ss = [], [], [], []
    for j, (n0, w) in enumerate(zip(cut, np.diff(np.append(cut, whole)))):
        st = ring_starts(int(w), grid.gm, q)
        cs.append(n0 + st)
        js.append(np.full(len(st), j))
        ps.append(np.arange(len(st)))
        ss.append(np.full(len(st), len(st)))
    cs, js, ps, ss = (np.concatenate(v) for v in (cs, js, ps, ss))
    gn, gk = len(ns), len(ks)
    if rows:                        # layout [pieces of each k block, n blocks]: piece p of (l, j) on (p, j, l)
        j = np.arange(gn)[None, :]
        tile_of = lambda row: ((row[:, None] * gn + j) * gk + js[:, None] + grid.rot) % c.t.tiles
        ks, cs = cs, ns
    else:                           # layout [k blocks, pieces of each n block]
        l = np.arange(gk)[:, None]
        tile_of = lambda row: ((row[None, :] * gn + js[None, :]) * gk + l + grid.rot) % c.t.tiles
    C = max(1, grid.copies)
    tiles = [tile_of((ps + d) % ss) for d in range(C)]
    if pool is not None and grid.inplace:
        pool.append((name, stream, grid, count, ks, cs, tiles, P, ps, ss))
        return
    _replicas(c, name, grid, [c._home_layout(name, stream, ks, cs, tl, count, True, P, region) for tl in tiles],
              ps, ss)


def pooled_homes(c, pool: list) -> None:
    """The in-place ring homes of `pool` (ring_home's entries) in one request per tile and
    member count, "weights.ring", block after block (16-byte aligned), member i of every
    block in member i of the request. The MATMUL reading a piece must find it in memory
    elements apart from its a operand (a bank edge), and a bank-separated sequence owns
    every element it touches (placement cannot put a in any of them), so one request a
    tile wastes at most one element pair where a request a piece wasted one each (the
    resident weights' request does the same: expand/matmul.py resident_weights)."""
    T = c.t.tiles
    align, region = isa.OPERANDS[isa.MATMUL]["b"]
    for count in sorted({p[3] for p in pool}):
        group = [p for p in pool if p[3] == count]
        used, offs = np.zeros(T, np.int64), []
        for name, _, _, _, ks, cs, tiles, P, _, _, *order in group:
            K, N = c.g.tensors[name].shape
            size = np.outer(np.diff(np.append(ks, K)), np.diff(np.append(cs, N))) * DTYPE_BYTES[c.g.tensors[name].dtype]
            o = order[0] if order else np.arange(size.size)             # 2-D units: piece order (ring2d.py)
            offs.append([_stack_in(used, tl.ravel(), pad(size, align).ravel(), o).reshape(tl.shape) for tl in tiles])
        has = np.flatnonzero(used)
        stride = pad(used, align) * (count > 1)
        req = np.full(T, -1, np.int64)
        req[has] = c.bld.alloc_rows("weights.ring", has, used[has], align, region, 0, END, count, stride[has])
        for (name, stream, grid, _, ks, cs, tiles, P, ps, ss, *_), off in zip(group, offs):
            t = c.g.tensors[name]
            reps = []
            for tl, o in zip(tiles, off):
                lay = Layout(*t.shape, ks, cs, tl, req[tl], DTYPE_BYTES[t.dtype], o, stride[tl], P, f"{name}.home")
                A, B = (x.ravel() for x in np.meshgrid(np.arange(len(ks)), np.arange(len(cs)), indexing="ij"))
                r0, c0, r, k = lay.rstart[A], lay.cstart[B], lay.rlen[A], lay.clen[B]
                host_rects(c.bld, stream, t.shape, lay.ebytes, count, P, r0, r0 + r, c0, c0 + k, lay.req[A, B],
                           lay.off[A, B], lay.istride[A, B], r0, c0, k)
                reps.append(lay)
            _replicas(c, name, grid, reps, ps, ss)


def _stack_in(used, tiles, sizes, order) -> np.ndarray:
    """_stack of the blocks taken in `order` (a permutation), offsets in the original order."""
    off = np.empty_like(tiles)
    off[order] = _stack(used, tiles[order], sizes[order])
    return off


def _stack(used: np.ndarray, tiles: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Offsets of blocks `sizes` on `tiles` after the bytes `used` so far on each tile
    (several blocks of one tile one after another, in order); updates `used`."""
    order = np.argsort(tiles, kind="stable")
    t, sz = tiles[order], sizes[order]
    before = np.cumsum(sz) - sz
    within = before - before[np.searchsorted(t, t)]
    off = np.empty_like(tiles)
    off[order] = used[t] + within
    np.add.at(used, tiles, sizes)
    return off


def _replicas(c, name: str, grid, reps: list, ps, ss) -> None:
    """c.lay[name] = replica 0; with copies, c.ring_rows[name] (ring_home): pieces are
    the layout's columns, or its rows (Grid.inplace 2)."""
    C = len(reps)
    c.lay[name] = reps[0]
    if grid.inplace == 3:           # 2-D units: ring2d.py reads the replicas by piece
        c.ring_reps[name] = reps
        return
    if C == 1:
        return
    rows = []
    for i in range(grid.gm):
        held = (i - ps) % ss                                         # replica holding piece p on row i
        d = np.where((held < C) & (i < ss), held, (i - ps) % C)
        lay = replace(reps[0], tile=reps[0].tile.copy(), req=reps[0].req.copy(), off=reps[0].off.copy(),
                      istride=reps[0].istride.copy())
        for r in range(1, C):
            sel = d == r
            at = (sel, slice(None)) if grid.inplace == 2 else (slice(None), sel)
            for f in ("tile", "req", "off", "istride"):
                getattr(lay, f)[at] = getattr(reps[r], f)[at]
        rows.append(lay)
    c.ring_rows[name] = rows


def gather_b(c, name: str, x: int, rows, r0, r1, c0, c1, tiles, req, off, stride, P: int) -> None:
    """B's blocks into the grid tiles' operand buffers: from its layout, or with ring
    copies (ring_home) grid row i from c.ring_rows[name][i] (`rows`: each tile's i)."""
    if name not in c.ring_rows:
        gather(c.bld, c.lay[name], x, r0, r1, c0, c1, tiles, req, off, stride, panel=P)
        return
    for i, lay in enumerate(c.ring_rows[name]):
        sel = rows == i
        if sel.any():
            gather(c.bld, lay, x, r0[sel], r1[sel], c0[sel], c1[sel], tiles[sel], req[sel], off[sel], stride[sel],
                   panel=P)


def local_pieces(c, first: int) -> None:
    """The exchange transfers added since c.bld.xfer[first] whose source tile is their
    destination become COPY kernels of the same rows (a sequence member read through
    the same relocation) in the current op's compute superstep."""
    bld = c.bld
    if len(bld.xfer) <= first:
        return
    x = concat(bld.xfer[first:])
    del bld.xfer[first:]
    self_ = x["src"] == x["dst"]
    bld.xfer.append(take(x, ~self_))
    y = take(x, self_)
    if not len(y["src"]):
        return
    one = y["s_rows"] == 1                   # a single row's strides: 0 (the COPY rule, sim/__init__.py)
    s = c.compute_step()
    c.kernel(step=s, tile=y["src"], op=isa.COPY, r0=y["dreq"], o0=y["doff"], r1=y["sreq"], o1=y["soff"],
             i0=y["s_row_bytes"], i1=y["s_rows"], i2=np.where(one, 0, y["d_stride"]),
             i3=np.where(one, 0, y["s_stride"]), reloc=y["reloc"])
    bld.reads(y["sreq"], s)
    bld.reads(y["dreq"], s)


def in_place(c, op, grid, gt, x: int, P: int):
    """Ring grid `grid` of matmul `op` read in place (Grid.inplace): per grid tile, its
    b's segments along the pieces' axis (columns; rows with inplace 2), in order: its own
    pieces where they live, and the runs of the others gathered in exchange step x into
    one operand buffer, each run a b of its own. Returns the buffer's request per tile id
    (-1: none) and the segments (tile, start, req, off, len, reloc; per tile in order),
    only for tiles that hold a piece of their block (the others read the whole block from
    the buffer)."""
    name = op.inputs[1]
    eb = DTYPE_BYTES[c.g.tensors[name].dtype]
    lay0, T, C = c.lay[name], c.t.tiles, max(1, grid.copies)
    rows_of = c.ring_rows.get(name)
    rows = grid.inplace == 2
    blk, starts, lens = (gt.l, gt.ks, gt.klen) if rows else (gt.j, gt.ns, gt.nlen)   # each tile's block on the axis
    across = gt.nlen[gt.j] if rows else gt.klen[gt.l]                                # its extent across the pieces
    pstart = lay0.rstart if rows else lay0.cstart
    pj = np.searchsorted(starts, pstart, side="right") - 1           # each piece's block
    first = np.searchsorted(pj, np.arange(len(starts)))              # each block's first piece
    count = np.bincount(pj, minlength=len(starts))
    recs, size = [], np.zeros(len(gt.tile), np.int64)
    for i in range(grid.gm):
        for s_ in np.unique(count):
            sel = np.flatnonzero((gt.i == i) & (count[blk] == s_))
            if not len(sel):
                continue
            b_ = blk[sel]
            own = [p for p in range(s_) if i < s_ and (i - p) % s_ < C]
            edges = np.concatenate([pstart[first[b_][:, None] + np.arange(s_)] - starts[b_][:, None],
                                    lens[b_][:, None]], 1)               # piece edges within the block
            runs, p = [], 0
            while p < s_:                                                # own pieces, runs of the rest
                e = p + 1 if p in own else next((q for q in range(p, s_) if q in own), s_)
                runs.append((p, e, p in own))
                p = e
            for p0, p1, mine in runs:
                a, b = edges[:, p0], edges[:, p1]
                rec = dict(sel=sel, i=i, start=a, len=b - a, mine=mine, piece=first[b_] + p0)
                if not mine:
                    rec["off"] = size[sel].copy()
                    size[sel] += pad(across[sel] * (b - a) * eb, 16)
                recs.append(rec)
    buf = np.full(T, -1, np.int64)
    has = size > 0
    buf[gt.tile[has]] = c.bld.alloc_rows(f"{op.outputs[0]}.b", gt.tile[has], size[has],
                                         *isa.OPERANDS[isa.MATMUL]["b"], x)
    segs = []
    for r in recs:
        sel, tiles = r["sel"], gt.tile[r["sel"]]
        l, j = gt.l[sel], gt.j[sel]
        k0, kl, n0, nl = gt.ks[l], gt.klen[l], gt.ns[j], gt.nlen[j]
        if r["mine"]:
            lay = rows_of[r["i"]] if rows_of else lay0
            at = (r["piece"], j) if rows else (l, r["piece"])
            segs.append(dict(tile=tiles, start=r["start"], req=lay.req[at], off=lay.off[at], len=r["len"],
                             reloc=lay.istride[at]))
            continue
        if rows:
            r0, r1, c0, c1 = k0 + r["start"], k0 + r["start"] + r["len"], n0, n0 + nl
        else:
            r0, r1, c0, c1 = k0, k0 + kl, n0 + r["start"], n0 + r["start"] + r["len"]
        gather_b(c, name, x, np.full(len(sel), r["i"]), r0, r1, c0, c1, tiles, buf[tiles], r["off"],
                 (c1 - c0) * eb, P)
        segs.append(dict(tile=tiles, start=r["start"], req=buf[tiles], off=r["off"], len=r["len"],
                         reloc=np.zeros(len(sel), np.int64)))
    segs = concat(segs)
    holder = np.zeros(T, bool)
    holder[gt.tile[gt.i < count[blk]]] = True
    return buf, take(segs, holder[segs["tile"]])

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
from ..plan.ring import ring_starts
from .layout import gather
from .tilegraph import concat, take


def ring_weights(graph, strategy: dict, resident) -> dict[str, int]:
    """Weight -> matmul, for the weights a candidate homes on their grid (Grid.ring,
    not kept resident)."""
    return {graph.ops[n].inputs[1]: n for n, gr in strategy.items()
            if getattr(gr, "ring", 0) and n not in resident}


def ring_home(c, name: str, stream: int, grid, count: int):
    """Weight `name`'s home on matmul n's grid: k blocks × (each n block's pieces),
    piece p of block (j, l) on grid tile (0, p, j, l) (from grid.rot), `count` members
    per piece. Sets c.lay[name]. With grid.copies = C > 1 (ring copies) replica d < C
    holds piece p on grid row (p + d) mod s (s: the block's pieces), one home request
    each, and c.ring_rows[name][i] is the layout grid row i gathers from: each piece
    from the replica on row i when it holds one (a local copy), else from replica
    (i - p) mod C (the receivers of a piece shared between its holders)."""
    t = c.g.tensors[name]
    P = panel_elems(c.t, t.dtype) if name in c.panels else 0
    if P:
        c.sent_in_panels(name, P)
    (K, N), q = t.shape, 1 if P else word_elems(t.dtype)
    ks, ns = np.arange(0, K, grid.kb), np.arange(0, N, grid.nb)     # the grid's blocks (expand/matmul.py GridTiles)
    cs, js, ps, ss = [], [], [], []
    for j, (n0, w) in enumerate(zip(ns, np.diff(np.append(ns, N)))):
        st = ring_starts(int(w), grid.gm, q)
        cs.append(n0 + st)
        js.append(np.full(len(st), j))
        ps.append(np.arange(len(st)))
        ss.append(np.full(len(st), len(st)))
    cs, js, ps, ss = (np.concatenate(v) for v in (cs, js, ps, ss))
    gn, gk = len(ns), len(ks)
    l = np.arange(gk)[:, None]
    tile_of = lambda row: ((row[None, :] * gn + js[None, :]) * gk + l + grid.rot) % c.t.tiles
    C = max(1, grid.copies)
    reps = [c._home_layout(name, stream, ks, cs, tile_of((ps + d) % ss), count, True, P) for d in range(C)]
    c.lay[name] = reps[0]
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
            for f in ("tile", "req", "off", "istride"):
                getattr(lay, f)[:, sel] = getattr(reps[r], f)[:, sel]
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

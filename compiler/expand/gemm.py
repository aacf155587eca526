"""GEMM candidate -> tile graph.

Supersteps: 1 exchange (operands from their homes into compute blocks), 2 compute
(MATMUL into FP16 partials); with a k-split, 3 exchange (partial rows to their
reducer) and 4 compute (ADD). Homes: whole rows of A and B spread over all tiles;
B's homes are rotated half-way round (policy.home_rotation) so the largest shards of
the two tensors do not pile up on the same tiles.
"""
from __future__ import annotations

import numpy as np

from .. import isa
from ..plan.gemm import OUT_BYTES, GemmCandidate, reduce_rows
from ..target import DTYPE_BYTES, STANDARD, Target
from .tilegraph import Builder, TileGraph


def _blocks(d: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each block of size b over a dimension d."""
    start = np.arange(0, d, b)
    return start, np.minimum(b, d - start)


class _Home:
    """Whole rows of a (rows × row_bytes) tensor, chunked over all tiles from `rot`."""

    def __init__(self, bld: Builder, name: str, rows: int, row_bytes: int, stream: int,
                 rot: int, start: int, end: int, align: int):
        t = bld.tiles
        self.rp = -(-rows // t)
        self.c0, self.cn = _blocks(rows, self.rp)
        self.tile = (np.arange(len(self.c0)) + rot) % t
        self.row_bytes = row_bytes
        self.req = bld.alloc(name, self.tile, self.cn * row_bytes, align, STANDARD, start, end)
        bld.add("hin", stream=stream, host_off=self.c0 * row_bytes, req=self.req[self.tile],
                off=0, row_bytes=self.cn * row_bytes, rows=1)

    def pieces(self, r0: int, r1: int):
        """(chunk, first row, row count) of the chunks covering rows [r0, r1)."""
        for c in range(r0 // self.rp, -(-r1 // self.rp)):
            x0, x1 = max(r0, self.c0[c]), min(r1, self.c0[c] + self.cn[c])
            yield c, x0, x1 - x0


def _gather(bld: Builder, home: _Home, r0: int, r1: int, col_off, width, dst_tiles, dst_req, dst_stride):
    """Exchange rows [r0, r1) × byte columns [col_off, col_off + width) of a homed tensor
    into a row-major buffer on each of dst_tiles (arrays broadcast together)."""
    for c, x0, nrows in home.pieces(r0, r1):
        src = home.tile[c]
        bld.add("xfer", step=1, src=src, dst=dst_tiles, sreq=home.req[src],
                soff=(x0 - home.c0[c]) * home.row_bytes + col_off, dreq=dst_req,
                doff=(x0 - r0) * dst_stride, s_row_bytes=width, s_rows=nrows, s_stride=home.row_bytes,
                d_row_bytes=width, d_rows=nrows, d_stride=dst_stride)


def expand_gemm(graph, cand: GemmCandidate, target: Target, home_rotation: bool) -> TileGraph:
    (op,) = graph.ops
    A, B = (graph.tensors[x] for x in op.inputs)
    C = graph.tensors[op.outputs[0]]
    m, k = A.shape
    n = B.shape[1]
    b = DTYPE_BYTES[A.dtype]
    gm, gn, gk, mb, kb, nb = cand.gm, cand.gn, cand.gk, cand.mb, cand.kb, cand.nb
    T = target.tiles
    reduce_ = gk > 1
    steps = ["exchange", "compute"] + (["exchange", "compute"] if reduce_ else [])
    end = len(steps) + 2
    bld = Builder(T)

    # compute grid: tile (i, j, l) = (i*gn + j)*gk + l
    ii, jj, ll = (x.ravel() for x in np.meshgrid(np.arange(gm), np.arange(gn), np.arange(gk), indexing="ij"))
    tile = (ii * gn + jj) * gk + ll
    ms, mn = _blocks(m, mb)
    ks, kn = _blocks(k, kb)
    ns, nn = _blocks(n, nb)
    mi, kl, nj = mn[ii], kn[ll], nn[jj]

    a_home = _Home(bld, "A.home", m, k * b, 0, 0, 0, 2, 8)
    b_home = _Home(bld, "B.home", k, n * b, 1, T // 2 if home_rotation else 0, 0, end, 16)
    # operand alignment and region class exactly as the machine's MATMUL demands
    spec = isa.OPERANDS[isa.MATMUL]
    a_blk = bld.alloc("A.blk", tile, mi * kl * b, *spec["a"], 1, 3)
    b_blk = bld.alloc("B.blk", tile, kl * nj * b, *spec["b"], 1, 3)
    p_blk = bld.alloc("P" if reduce_ else "C.blk", tile, mi * nj * OUT_BYTES, *spec["out"],
                      2, 4 if reduce_ else end)
    bld.bank.append(np.stack([a_blk[tile], b_blk[tile]], 1))

    # superstep 1: operands from homes
    for i in range(gm):
        sel = ii == i
        _gather(bld, a_home, ms[i], ms[i] + mn[i], ks[ll[sel]] * b, kl[sel] * b,
                tile[sel], a_blk[tile[sel]], kl[sel] * b)
    for l in range(gk):
        sel = ll == l
        _gather(bld, b_home, ks[l], ks[l] + kn[l], ns[jj[sel]] * b, nj[sel] * b,
                tile[sel], b_blk[tile[sel]], nj[sel] * b)

    # superstep 2: partial products
    bld.add("kern", step=2, tile=tile, op=isa.MATMUL, dtype=isa.DTYPES[A.dtype],
            r0=a_blk[tile], r1=b_blk[tile], r2=p_blk[tile], i0=mi, i1=kl, i2=nj,
            scale=A.scale * B.scale)

    if not reduce_:
        bld.add("hout", stream=0, host_off=(ms[ii] * n + ns[jj]) * OUT_BYTES, req=p_blk[tile],
                row_bytes=nj * OUT_BYTES, rows=mi, host_stride=n * OUT_BYTES, tile_stride=nj * OUT_BYTES)
    else:
        # superstep 3: tile l of a block reduces rows [l*rr, (l+1)*rr) of the gk partials
        rr = reduce_rows(mb, gk)
        r0 = ll * rr
        rows = np.clip(mi - r0, 0, rr)
        red = rows > 0
        nbytes = rows * nj * OUT_BYTES
        slot = -(-nbytes // 8) * 8                # received slices start 8-byte aligned for ADD
        recv = bld.alloc("P.recv", tile[red], (gk - 1) * slot[red], 8, STANDARD, 3, 5)
        c_blk = bld.alloc("C.blk", tile[red], nbytes[red], 8, STANDARD, 4, end)
        for d in range(1, gk):                    # peer l' = (l + d) mod gk, slot q = d - 1
            peer = (ii * gn + jj) * gk + (ll + d) % gk
            bld.add("xfer", step=3, src=peer[red], dst=tile[red], sreq=p_blk[peer[red]],
                    soff=(r0 * nj * OUT_BYTES)[red], dreq=recv[tile[red]], doff=(d - 1) * slot[red],
                    s_row_bytes=nbytes[red], s_rows=1, s_stride=0,
                    d_row_bytes=nbytes[red], d_rows=1, d_stride=0)
        t = tile[red]
        bld.add("kern", step=4, tile=t, op=isa.ADD, dtype=isa.DTYPES["f16"],
                r0=c_blk[t], r1=p_blk[t], o1=(r0 * nj * OUT_BYTES)[red], r2=recv[t],
                i0=gk - 1, i1=(rows * nj)[red], i2=slot[red])
        bld.add("hout", stream=0, host_off=((ms[ii] + r0) * n + ns[jj])[red] * OUT_BYTES, req=c_blk[t],
                row_bytes=(nj * OUT_BYTES)[red], rows=rows[red], host_stride=n * OUT_BYTES,
                tile_stride=(nj * OUT_BYTES)[red])
    return bld.build(steps, ["A", "B"], {C.name: C.nbytes}, cand.label)

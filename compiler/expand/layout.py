"""Distributed 2-D layouts and the one exchange primitive: gathering rectangles.

Every tensor is a matrix [rows, cols] (attention heads are column windows). A layout
partitions it into a grid of blocks by row starts and column starts; block (a, b) is
stored on tile `tile[a, b]` in request `req[a, b]`, row-major, or with `panel` = P in
AMP micro-panel order (isa.panel_order: its panel rows one after another, each
[columns][P]; row starts on panel edges). Homes (plan/homes.py) and operator outputs
are layouts alike.

`gather` moves arbitrary rectangles of a laid-out tensor into destination buffers as
symbolic row transfers: one transfer per (rectangle, overlapped block), never one per
row or byte. Conversions between layouts are gathers of the destination's blocks.
Between panel-ordered layouts a transfer is one strided run of whole panel spans (and
one for the tensor's last, partial panel); from row-major into panels it would be a
byte-wise permutation, which `gather` refuses (Unencodable) rather than emit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..target import STANDARD
from .tilegraph import Builder


class Unencodable(ValueError):
    """A transfer the exchange cannot express in whole words (a byte-wise permutation)."""


@dataclass
class Layout:
    rows: int
    cols: int
    rstart: np.ndarray          # int64[nr], first = 0
    cstart: np.ndarray          # int64[nc]
    tile: np.ndarray            # int64[nr, nc]
    req: np.ndarray             # int64[nr, nc] request row of each block
    ebytes: int                 # bytes per element
    off: np.ndarray | None = None   # int64[nr, nc] byte offset of the block in its request
    istride: np.ndarray | None = None  # int64[nr, nc] bytes between sequence members (0: none)
    panel: int = 0              # micro-panel height (0: row-major)
    name: str = ""              # its requests' name (for messages)

    def __post_init__(self):
        if self.off is None:
            self.off = np.zeros_like(self.tile)
        if self.istride is None:
            self.istride = np.zeros_like(self.tile)

    @property
    def rlen(self) -> np.ndarray:
        return np.diff(np.append(self.rstart, self.rows))

    @property
    def clen(self) -> np.ndarray:
        return np.diff(np.append(self.cstart, self.cols))

    def block_bytes(self) -> np.ndarray:
        return np.outer(self.rlen, self.clen) * self.ebytes

    @property
    def full_rows(self) -> bool:
        return len(self.cstart) == 1


def pad(x, a: int):
    """x rounded up to a multiple of a (arrays too)."""
    return -(-np.asarray(x) // a) * a


def allocate(bld: Builder, name: str, rows: int, cols: int, rstart, cstart, tile, ebytes: int,
             align: int, region: int, start: int, end=None, count: int = 1, panel: int = 0) -> Layout:
    """A layout with one fresh request per block (a sequence of `count` members each,
    members `istride` apart)."""
    rstart, cstart = np.asarray(rstart, np.int64), np.asarray(cstart, np.int64)
    tile = np.asarray(tile, np.int64).reshape(len(rstart), len(cstart))
    lay = Layout(rows, cols, rstart, cstart, tile, np.zeros_like(tile), ebytes, panel=panel, name=name)
    size = lay.block_bytes().ravel()
    stride = -(-size // align) * align if count > 1 else 0
    rows_of = bld.alloc_rows(name, tile.ravel(), size, align, region, start, end, count, stride)
    lay.req = rows_of.reshape(tile.shape)
    lay.istride = np.asarray(stride, np.int64).reshape(-1) * np.ones(tile.size, np.int64)
    lay.istride = lay.istride.reshape(tile.shape)
    return lay


def blocks(lay: Layout):
    """Every block of a layout as flat arrays (row block, col block, rows, cols)."""
    A, B = (x.ravel() for x in np.meshgrid(np.arange(len(lay.rstart)), np.arange(len(lay.cstart)),
                                          indexing="ij"))
    return A, B, lay.rlen[A], lay.clen[B]


def like(bld: Builder, name: str, lay: Layout, step: int, ebytes: int) -> Layout:
    """A fresh layout with the same blocks on the same tiles."""
    return allocate(bld, name, lay.rows, lay.cols, lay.rstart, lay.cstart, lay.tile, ebytes, 8, STANDARD, step)


def _overlaps(st: np.ndarray, n: int, lo: np.ndarray, hi: np.ndarray):
    """For each interval [lo, hi) the partition blocks it overlaps: (interval index, block)."""
    first = np.searchsorted(st, lo, side="right") - 1
    last = np.searchsorted(st, hi - 1, side="right") - 1
    cnt = last - first + 1
    idx = np.repeat(np.arange(len(lo)), cnt)
    blk = first[idx] + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    return idx, blk


def panel_runs(R: int, P: int, r0, r1, c0, c1, rb, cb, W):
    """Rectangles [r0, r1) × [c0, c1) of panel-ordered blocks of an [R, ·] tensor (block
    rows from rb, columns from cb, W columns wide; r0 on a panel edge, r1 on one or R),
    each as two runs of spans: its full panels (one span of (c1-c0)·P elements per
    panel, P·W apart) and the tensor's last, partial panel. Per run: (spans, elements
    per span, first element, stride in elements); spans 0 where a run is empty."""
    full, h = R - R % P, R % P
    w = c1 - c0
    nf = np.clip((np.minimum(r1, full) - r0) // P, 0, None)
    part = ((r1 > full) & (h > 0)).astype(np.int64)
    return ((nf, w * P, (r0 - rb) * W + (c0 - cb) * P, P * W),
            (part, w * h, (full - rb) * W + (c0 - cb) * h, 0 * w))


def gather(bld: Builder, src: Layout, step: int, r0, r1, c0, c1, dst_tile, dst_req, dst_off, dst_stride,
           panel: int = 0):
    """Copy rectangles src[r0:r1, c0:c1] (arrays, one per rectangle) into destinations:
    row-major, element (r, c) at dst_off + (r-r0)*dst_stride + (c-c0)*ebytes of request
    dst_req on dst_tile; or, with `panel`, a panel-ordered block of the rectangle at
    dst_off (dst_stride unused). Returns the number of transfers emitted."""
    r0, r1, c0, c1, dst_tile, dst_req, dst_off, dst_stride = np.broadcast_arrays(
        *(np.asarray(x, np.int64) for x in (r0, r1, c0, c1, dst_tile, dst_req, dst_off, dst_stride)))
    if src.panel != panel:
        n = int(((r1 - r0) * (c1 - c0)).sum())
        raise Unencodable(f"{src.name or 'a tensor'}: {'micro-panel' if src.panel else 'row-major'} blocks into "
                          f"{'AMP micro-panels of ' + str(panel) if panel else 'row-major'} would move "
                          f"{n} single elements of {src.ebytes} B (a byte-wise permutation; store it in the "
                          f"order its consumer reads: policy.panel_homes)")
    ri, rb = _overlaps(src.rstart, src.rows, r0, r1)        # (rect, row block) pairs
    ci, cb = _overlaps(src.cstart, src.cols, c0, c1)        # (rect, col block) pairs
    # cartesian product of each rectangle's row blocks and column blocks
    rcount = np.bincount(ri, minlength=len(r0))
    ccount = np.bincount(ci, minlength=len(r0))
    rfirst = np.cumsum(rcount) - rcount
    cfirst = np.cumsum(ccount) - ccount
    per = rcount * ccount
    rect = np.repeat(np.arange(len(r0)), per)
    k = np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per)
    rsel = rfirst[rect] + k // ccount[rect]
    csel = cfirst[rect] + k % ccount[rect]
    a, b = rb[rsel], cb[csel]
    e = src.ebytes
    bs_r, bs_c = src.rstart[a], src.cstart[b]
    bcols = src.clen[b]
    pr0 = np.maximum(r0[rect], bs_r)
    pr1 = np.minimum(r1[rect], bs_r + src.rlen[a])
    pc0 = np.maximum(c0[rect], bs_c)
    pc1 = np.minimum(c1[rect], bs_c + bcols)
    # runs of spans in bytes: (spans, span, source offset, stride, destination offset, stride)
    if panel:
        runs = [(n, sp * e, so * e, ss * e, do * e, ds * e) for (n, sp, so, ss), (_, _, do, ds) in zip(
            panel_runs(src.rows, panel, pr0, pr1, pc0, pc1, bs_r, bs_c, bcols),
            panel_runs(src.rows, panel, pr0, pr1, pc0, pc1, r0[rect], c0[rect], c1[rect] - c0[rect]))]
    else:
        runs = [(pr1 - pr0, (pc1 - pc0) * e, ((pr0 - bs_r) * bcols + pc0 - bs_c) * e, bcols * e,
                 (pr0 - r0[rect]) * dst_stride[rect] + (pc0 - c0[rect]) * e, dst_stride[rect])]
    for n, span, so, ss, do, ds in runs:
        k = n > 0
        bld.add("xfer", step=step, src=src.tile[a, b][k], dst=dst_tile[rect][k], sreq=src.req[a, b][k],
                soff=(src.off[a, b] + so)[k], dreq=dst_req[rect][k], doff=(dst_off[rect] + do)[k],
                s_row_bytes=span[k], s_rows=n[k], s_stride=ss[k], d_row_bytes=span[k], d_rows=n[k],
                d_stride=ds[k], reloc=src.istride[a, b][k])
    bld.reads(src, step)
    return len(rect)


def host_rects(bld: Builder, stream: int, shape, ebytes: int, count: int, P: int, r0, r1, c0, c1,
               req, off, mstride, rb, cb, W):
    """The host writes rectangles [r0, r1) × [c0, c1) of every member i < count of a
    stream of [R, C] matrices into blocks (request `req` at off + i·mstride) holding
    them at block coordinates (rb, cb), W columns wide: row-major (P = 0), or in
    micro-panel order, the stream sent rearranged by the host (lower/program.py
    in_panels), so each write is a run of whole panel spans."""
    R, C = shape
    e, i = ebytes, np.arange(count)[:, None]
    r0, r1, c0, c1, req, off, mstride, rb, cb, W = np.broadcast_arrays(
        *(np.asarray(x, np.int64) for x in (r0, r1, c0, c1, req, off, mstride, rb, cb, W)))
    if not P:
        runs = [(r1 - r0, c1 - c0, r0 * C + c0, C, (r0 - rb) * W + c0 - cb, W)]
    else:
        runs = [(n, span, h0, hs, t0, ts) for (n, span, h0, hs), (_, _, t0, ts)
                in zip(panel_runs(R, P, r0, r1, c0, c1, 0, 0, C), panel_runs(R, P, r0, r1, c0, c1, rb, cb, W))]
    for run in runs:
        n, span, h0, hs, t0, ts = (np.broadcast_to(x, r0.shape) for x in run)
        k = n > 0
        rep = lambda v: np.broadcast_to(v[k], (count, int(k.sum()))).ravel()
        bld.add("hin", stream=stream, host_off=(i * R * C * e + h0[k] * e).ravel(), req=rep(req),
                off=(off[k] + i * mstride[k] + t0[k] * e).ravel(), row_bytes=rep(span * e), rows=rep(n),
                host_stride=rep(hs * e), tile_stride=rep(ts * e))


def convert(bld: Builder, src: Layout, name: str, rstart, cstart, tile, step: int, align: int,
            region: int, end=None) -> Layout:
    """A new layout of the same tensor, filled by one exchange from `src`."""
    dst = allocate(bld, name, src.rows, src.cols, rstart, cstart, tile, src.ebytes, align, region, step, end)
    fill(bld, src, dst, step)
    return dst


def fill(bld: Builder, src: Layout, dst: Layout, step: int) -> None:
    """Exchange the tensor from `src` into the existing blocks of `dst`."""
    R, C = np.meshgrid(np.arange(len(dst.rstart)), np.arange(len(dst.cstart)), indexing="ij")
    R, C = R.ravel(), C.ravel()
    rl, cl = dst.rlen[R], dst.clen[C]
    gather(bld, src, step, dst.rstart[R], dst.rstart[R] + rl, dst.cstart[C], dst.cstart[C] + cl,
           dst.tile[R, C], dst.req[R, C], dst.off[R, C], cl * src.ebytes)

"""Distributed 2-D layouts and the one exchange primitive: gathering rectangles.

Every tensor is a matrix [rows, cols] (attention heads are column windows). A layout
partitions it into a grid of blocks by row starts and column starts; block (a, b) is
stored row-major on tile `tile[a, b]` in request `req[a, b]`. Homes (row chunks
spread over all tiles) and operator outputs are layouts alike.

`gather` moves arbitrary rectangles of a laid-out tensor into destination buffers as
symbolic row transfers: one transfer per (rectangle, overlapped block), never one per
row or byte. Conversions between layouts are gathers of the destination's blocks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tilegraph import Builder


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


def spread(n: int, T: int) -> np.ndarray:
    """n blocks on tiles evenly spaced over all T: with n <= T/2 no two share a
    supertile, so every sender has its exchange bus to itself."""
    return np.arange(n) * T // max(n, 1)


def starts(n: int, parts: int) -> np.ndarray:
    """Even partition of n into at most `parts` non-empty blocks."""
    b = -(-n // max(1, min(parts, n)))
    return np.arange(0, n, b, dtype=np.int64)


def allocate(bld: Builder, name: str, rows: int, cols: int, rstart, cstart, tile, ebytes: int,
             align: int, region: int, start: int, end=None, count: int = 1) -> Layout:
    """A layout with one fresh request per block (a sequence of `count` members each,
    members `istride` apart)."""
    rstart, cstart = np.asarray(rstart, np.int64), np.asarray(cstart, np.int64)
    tile = np.asarray(tile, np.int64).reshape(len(rstart), len(cstart))
    lay = Layout(rows, cols, rstart, cstart, tile, np.zeros_like(tile), ebytes)
    size = lay.block_bytes().ravel()
    stride = -(-size // align) * align if count > 1 else 0
    rows_of = bld.alloc_rows(name, tile.ravel(), size, align, region, start, end, count, stride)
    lay.req = rows_of.reshape(tile.shape)
    lay.istride = np.asarray(stride, np.int64).reshape(-1) * np.ones(tile.size, np.int64)
    lay.istride = lay.istride.reshape(tile.shape)
    return lay


def _overlaps(st: np.ndarray, n: int, lo: np.ndarray, hi: np.ndarray):
    """For each interval [lo, hi) the partition blocks it overlaps: (interval index, block)."""
    first = np.searchsorted(st, lo, side="right") - 1
    last = np.searchsorted(st, hi - 1, side="right") - 1
    cnt = last - first + 1
    idx = np.repeat(np.arange(len(lo)), cnt)
    blk = first[idx] + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    return idx, blk


def gather(bld: Builder, src: Layout, step: int, r0, r1, c0, c1, dst_tile, dst_req, dst_off, dst_stride):
    """Copy rectangles src[r0:r1, c0:c1] (arrays, one per rectangle) into row-major
    destinations: element (r, c) lands at dst_off + (r-r0)*dst_stride + (c-c0)*ebytes
    of request dst_req on dst_tile. Returns the number of transfers emitted."""
    r0, r1, c0, c1, dst_tile, dst_req, dst_off, dst_stride = np.broadcast_arrays(
        *(np.asarray(x, np.int64) for x in (r0, r1, c0, c1, dst_tile, dst_req, dst_off, dst_stride)))
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
    width = (pc1 - pc0) * e
    nrows = pr1 - pr0
    bld.add("xfer", step=step, src=src.tile[a, b], dst=dst_tile[rect], sreq=src.req[a, b],
            soff=src.off[a, b] + ((pr0 - bs_r) * bcols + (pc0 - bs_c)) * e, dreq=dst_req[rect],
            doff=dst_off[rect] + (pr0 - r0[rect]) * dst_stride[rect] + (pc0 - c0[rect]) * e,
            s_row_bytes=width, s_rows=nrows, s_stride=bcols * e,
            d_row_bytes=width, d_rows=nrows, d_stride=dst_stride[rect], reloc=src.istride[a, b])
    bld.reads(src, step)
    return len(rect)


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

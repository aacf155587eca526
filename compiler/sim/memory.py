"""Tile memory and the byte movers every other part of the machine uses.

All tiles' memories are one uint8 array [tiles, tile_bytes]; a byte is addressed
by its *flat position* tile*tile_bytes + (addr - memory_base). Every transfer
(kernel operands, local copies, exchange, host streams, code loading) is a set
of contiguous chunks: moved by compiled loops (move between buffers, move_pairs and
move_within inside tile memory), or gathered with
one fancy index per chunk length on a "records" view of the buffer (each item
is L bytes starting at one position), so nothing loops over rows or bytes in
Python.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..target import Target
from . import jit

I64 = np.int64
_STAGE = [np.empty(0, np.uint8)]       # move_pairs' staging buffer
_STAGE_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None    # the moves' second thread, made on first use
PARALLEL_BYTES = 1 << 20                   # a move of fewer bytes stays on one thread


def windows(buf: np.ndarray, length: int) -> np.ndarray:
    """View of `buf` (1-D uint8) whose row p is buf[p:p+length]. Writable: a
    fancy-indexed assignment writes through to `buf`."""
    n = max(buf.size - length + 1, 0)
    return as_strided(buf, shape=(n, length), strides=(buf.strides[0], buf.strides[0]))


def records(buf: np.ndarray, length: int) -> np.ndarray:
    """View of a contiguous 1-D uint8 `buf` whose element p is the `length`-byte record
    buf[p:p+length] (one opaque item per chunk: numpy copies each with one memcpy, about
    twice as fast as the rows of `windows`). Writable, like `windows`."""
    n = max(buf.size - length + 1, 0)
    return np.ndarray((n,), dtype=np.dtype((np.void, length)), buffer=buf, strides=(1,))


def gather(buf: np.ndarray, pos: np.ndarray, length: int) -> np.ndarray:
    """Copy of buf[pos[i]:pos[i]+length] for every i -> uint8[n, length]."""
    if length == 0 or len(pos) == 0:
        return np.zeros((len(pos), length), np.uint8)
    if buf.flags.c_contiguous:
        return records(buf, length)[pos].view(np.uint8).reshape(len(pos), length)
    return windows(buf, length)[pos]


def scatter(buf: np.ndarray, pos: np.ndarray, data: np.ndarray) -> None:
    """buf[pos[i]:pos[i]+L] = data[i]; with overlapping destinations the later
    row wins (numpy assigns in index order)."""
    data = np.ascontiguousarray(data).view(np.uint8).reshape(len(pos), -1)
    L = data.shape[1]
    if L == 0 or len(pos) == 0:
        return
    if buf.flags.c_contiguous:
        records(buf, L)[pos] = data.view(np.dtype((np.void, L))).reshape(-1)
    else:
        windows(buf, L)[pos] = data


def extent(row_bytes, rows, stride):
    """Bytes spanned by a strided descriptor: from its first byte to past its last."""
    rows = np.asarray(rows, I64)
    return np.where(rows > 0, (rows - 1) * np.asarray(stride, I64) + np.asarray(row_bytes, I64), 0)


def chunk_offsets(s_rb, s_rows, s_stride, d_rb, d_rows, d_stride):
    """Split N strided-to-strided transfers (equal byte totals per transfer,
    checked by the caller) into chunks contiguous on both sides, as offsets from
    each transfer's first byte (so a plan is reused when only addresses change).

    A side whose rows abut (stride == row_bytes, or one row) is one contiguous
    run; otherwise its rows are its runs. Chunks are gcd(run_src, run_dst) bytes,
    so every chunk boundary is a run boundary on both sides: a reshaping
    transfer (64-byte rows into one contiguous row) costs rows chunks, not bytes.
    Returns (transfer of each chunk, src offsets, dst offsets, chunk lengths)."""
    a = [np.asarray(x, I64) for x in (s_rb, s_rows, s_stride, d_rb, d_rows, d_stride)]
    s_rb, s_rows, s_stride, d_rb, d_rows, d_stride = a
    total = s_rb * s_rows
    s_run = np.where((s_rows <= 1) | (s_stride == s_rb), total, s_rb)
    d_run = np.where((d_rows <= 1) | (d_stride == d_rb), total, d_rb)
    g = np.gcd(s_run, d_run)
    g = np.where(g > 0, g, 1)
    n = np.where(total > 0, total // g, 0)
    if (n == 1).all():                                   # the common case: one chunk per transfer
        return np.arange(len(n)), np.zeros(len(n), I64), np.zeros(len(n), I64), g
    idx = np.repeat(np.arange(len(total)), n)
    first = np.cumsum(n) - n
    c = (np.arange(int(n.sum()), dtype=I64) - first[idx]) * g[idx]   # byte offset of chunk
    sr, dr = s_run[idx], d_run[idx]
    so = (c // sr) * s_stride[idx] + c % sr
    do = (c // dr) * d_stride[idx] + c % dr
    return idx, so, do, g[idx]


def plan_chunks(src_pos, s_rb, s_rows, s_stride, dst_pos, d_rb, d_rows, d_stride):
    """chunk_offsets at positions: returns (src positions, dst positions, chunk lengths)."""
    idx, so, do, L = chunk_offsets(s_rb, s_rows, s_stride, d_rb, d_rows, d_stride)
    return np.asarray(src_pos, I64)[idx] + so, np.asarray(dst_pos, I64)[idx] + do, L


def by_length(length):
    """Chunks grouped by length: (order, [(L, lo, hi)]) with order[lo:hi] the chunks of L."""
    length = np.asarray(length, I64)
    order = np.argsort(length, kind="stable")
    ls = length[order]
    cut = np.flatnonzero(np.r_[True, ls[1:] != ls[:-1]]) if len(ls) else np.zeros(0, I64)
    ends = np.r_[cut[1:], len(ls)]
    return order, [(int(ls[a]), int(a), int(b)) for a, b in zip(cut, ends)]


def move(src: np.ndarray, dst: np.ndarray, sp, dp, length, split: int | None = None) -> None:
    """Copy chunks src[sp:sp+len] -> dst[dp:dp+len] between two buffers that share no
    memory (program load, host streams): no write can touch a read, so every chunk moves
    straight, in by_length order (by length, then index: where destinations overlap, the
    chunk written last wins). `split`: a destination position no chunk straddles (a tile
    boundary); then a large move runs on two threads, one writing below it and one above,
    each in the same order -- the same bytes as one thread. A move within one buffer is
    move_within's (or move_pairs')."""
    if np.may_share_memory(src, dst):
        raise ValueError("memory.move: source and destination share memory (use move_within)")
    if len(sp) == 0:
        return
    order = by_length(length)[0]
    length = np.asarray(length)
    dp = np.asarray(dp, I64)
    two = (split is not None and len(order) > 1 and int(length.sum(dtype=I64)) >= PARALLEL_BYTES
           and jit.split_ok(dp, length, split))
    below_above = ((0, split), (split, dst.size)) if two else ((0, dst.size),)
    src_off = np.asarray(sp, I64)[order]
    _parts(lambda lo, hi: jit.scatter_part(dst, dp, length, order, src_off, src, lo, hi), below_above)


def move_within(flat: np.ndarray, T: int, tile_bytes: int, sp, dp, length) -> int:
    """COPY's move, on flat = all tiles' memory, each chunk inside one tile (its source and
    its destination): move_pairs with every chunk a pair of its own, written in by_length
    order, so it stages only chunks whose source some destination may touch. Returns the
    bytes staged."""
    n = len(sp)
    if n == 0:
        return 0
    dp = np.asarray(dp, I64)
    order, n_lo = write_order(length, dp < (T // 2) * tile_bytes)
    length = np.asarray(length, np.int32)
    c, zero = np.arange(n, dtype=np.int32), np.zeros(n, np.int32)
    return move_pairs(flat, T, tile_bytes, np.asarray(sp, I64), length, dp, length, c, zero, zero, length,
                      order, n_lo)


def write_order(length, low) -> tuple[np.ndarray, int]:
    """move_pairs' write order: by_length's (the later wins where destinations overlap), the
    chunks with `low` (written into tiles below T // 2) first; returns (order as int32, how
    many are low). Chunks in different halves never overlap, so the halves' order is free."""
    order = by_length(length)[0]
    lo = np.asarray(low)[order]
    return np.concatenate([order[lo], order[~lo]]).astype(np.int32), int(lo.sum())


_MARKS = [np.empty(0, np.uint8), 0]        # move_pairs' granule marks and their epoch


def move_pairs(flat: np.ndarray, T: int, tile_bytes: int, sb, s_ext, db, d_ext,
               c, soff, doff, length, order, n_lo: int) -> int:
    """The exchange's move (and COPY's, move_within), on flat = all tiles' memory: chunk k of
    pair c[k] moves flat[sb[c[k]] + soff[k]:+length[k]] -> flat[db[c[k]] + doff[k]:+...],
    every chunk read before any is written, written in `order` (the later wins where two
    destinations overlap). Pair p is a send entry spanning
    [sb[p], +s_ext[p]) and its receive spanning [db[p], +d_ext[p]), each inside one tile.
    order[:n_lo] are the chunks written below tile T // 2 and order[n_lo:] the others (a
    chunk stays in its tile), each part in the write order: a large move runs them on two
    threads, the same bytes as one.
    Staging: only chunks whose source may share a byte with some destination are copied to
    the staging buffer first (jit.hot_tiles, jit.stage_mask); a chunk whose
    source no write touches reads the same bytes late as early, so it moves straight.
    Returns the bytes staged."""
    n = len(order)
    if n == 0:
        return 0
    total = int(length.sum(dtype=I64))
    two = 0 < n_lo < n and total >= PARALLEL_BYTES
    hot = np.zeros(T, np.uint8)
    parts = ((0, n_lo), (n_lo, n)) if two else ((0, n),)
    staged, mask, off = 0, np.zeros(0, np.uint8), np.zeros(0, I64)
    if jit.hot_tiles(T, tile_bytes, sb, s_ext, db, d_ext, hot):
        with _STAGE_LOCK:
            if _MARKS[0].size < (flat.size >> jit.GRAIN) + 1:
                _MARKS[0], _MARKS[1] = np.zeros((flat.size >> jit.GRAIN) + 1, np.uint8), 0
            _MARKS[1] += 1
            if _MARKS[1] > 255:                      # epochs wrapped: old marks would read as new
                _MARKS[0][:], _MARKS[1] = 0, 1
            mask = np.empty(len(c), np.uint8)
            staged = int(jit.stage_mask(sb, soff, db, doff, c, length, hot, tile_bytes,
                                        _MARKS[0], _MARKS[1], mask))
        if staged == 0:
            mask = np.zeros(0, np.uint8)
    with _STAGE_LOCK:
        if staged:
            if _STAGE[0].size < staged:
                _STAGE[0] = np.empty(staged, np.uint8)
            off = np.empty(n, I64)
            jit.stage_offsets(length, order, mask, off)
            _parts(lambda k0, k1: jit.stage_gather(flat, sb, soff, c, length, order, mask, off, _STAGE[0],
                                                   k0, k1), parts)
        buf = _STAGE[0]
        _parts(lambda k0, k1: jit.pairs_scatter(flat, db, doff, c, length, order[k0:k1], flat, sb, soff, mask,
                                                off[k0:k1] if staged else off, buf), parts)
    return staged


def _parts(fn, parts) -> None:
    """fn(*part) for each part: one on this thread, or two, the first on a helper thread
    (compiled loops that release the GIL), then wait."""
    global _POOL
    if len(parts) == 1:
        fn(*parts[0])
        return
    if _POOL is None:
        _POOL = ThreadPoolExecutor(1, thread_name_prefix="sim-move")
    f = _POOL.submit(fn, *parts[0])
    try:
        fn(*parts[1])
    finally:
        f.result()


def drop_stage() -> None:
    """Free move_pairs' staging buffer and marks (at the end of a run)."""
    with _STAGE_LOCK:
        _STAGE[0] = np.empty(0, np.uint8)
        _MARKS[0], _MARKS[1] = np.empty(0, np.uint8), 0


class Memory:
    """All tiles' memories and their address arithmetic."""

    def __init__(self, target: Target):
        self.t = target
        self.tiles = target.tiles
        self.base = target.memory_base
        self.r0 = target.region0_end
        self.end = target.memory_end
        self.tile_bytes = target.tile_bytes
        self.mem = np.zeros((self.tiles, self.tile_bytes), np.uint8)
        self.flat = self.mem.reshape(-1)
        self.flat16 = self.flat.view(np.uint16)   # f16 operands (even positions) for the compiled loads

    def pos(self, tile, addr):
        return np.asarray(tile, I64) * self.tile_bytes + (np.asarray(addr, I64) - self.base)

    def in_range(self, lo, size):
        lo = np.asarray(lo, I64)
        return (lo >= self.base) & (lo + np.asarray(size, I64) <= self.end)

    def read_words(self, tile, addr, nwords: int) -> np.ndarray:
        """Little-endian uint32 words -> int64[n, nwords] (int64 so arithmetic on
        address words never wraps)."""
        b = gather(self.flat, self.pos(tile, addr), 4 * nwords)
        return b.view("<u4").astype(I64).reshape(len(b), nwords)

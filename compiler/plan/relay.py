"""Operand relay (policy.operand_relay): spread a matmul's A over idle tiles before
gathering it.

An exchange lasts as long as its busiest tile, sending or receiving
(docs/architecture.md §2). A LayerNorm's output (and any whole-row layout of a tensor
with fewer rows than tiles) sits one row per tile on only `rows` of the T tiles; a
matmul grid reading it sends each A element to the gn tiles of its row block, so each
holder sends gn × a whole row while a consumer receives only its mb × kb block: at
So400m's 729 tokens and a 9x27x6 grid, 62 KB sent against 31 KB received per tile, the
exchange twice as long as its receivers need.

The relay first moves pieces of each row to idle tiles (one extra exchange superstep:
each holder keeps piece 0 in place and sends the others, each helper receives one
piece), so the gather that follows has rows × s senders instead of rows. Plan's beam
prices both (plan/beam.py: Options field `relay`), expand builds the pieces
(expand/matmul.py) from this same layout function, so the two agree.
"""
from __future__ import annotations

import numpy as np

PIECE_ELEMS = 32     # piece widths are multiples of 32 elements: whole words for any dtype, AMP in-groups


def relay_pieces(r0, nr, c0, nc, tile, cols: int, T: int):
    """For a layout's blocks (flat arrays: row start, rows, column start, columns, tile)
    that are single whole rows on distinct tiles with idle tiles left: the piece column
    starts cs and tiles [blocks, len(cs)] (column 0: the block's own tile, the others
    idle tiles in order, each used once); None when the layout is not of that kind or
    the idle tiles are too few for two pieces per row."""
    r0, nr, c0, nc, tile = (np.asarray(x, np.int64) for x in (r0, nr, c0, nc, tile))
    n = len(tile)
    if n == 0 or not ((nr == 1).all() and (c0 == 0).all() and (nc == cols).all()):
        return None
    if len(np.unique(tile)) != n:
        return None
    free = np.setdiff1d(np.arange(T), tile)
    s = min(1 + len(free) // n, cols // PIECE_ELEMS)
    if s < 2:
        return None
    width = -(-(-(-cols // s)) // PIECE_ELEMS) * PIECE_ELEMS
    cs = np.arange(0, cols, width, dtype=np.int64)
    s = len(cs)
    if s < 2:
        return None
    order = np.argsort(r0, kind="stable")                  # helpers assigned in row order
    helpers = np.empty((n, s - 1), np.int64)
    helpers[order] = free[: n * (s - 1)].reshape(n, s - 1)
    return cs, np.concatenate([tile[:, None], helpers], 1)


def relay_blocks(blocks, cols: int, T: int):
    """The pieces as blocks (r0, nr, c0, nc, tile), and per tile the elements the relay
    exchange moves: (sent[T], received[T]) in elements; None when
    relay_pieces is."""
    r0, nr, c0, nc, tile = blocks
    got = relay_pieces(r0, nr, c0, nc, tile, cols, T)
    if got is None:
        return None
    cs, tiles = got
    n, s = tiles.shape
    widths = np.diff(np.append(cs, cols))
    R0 = np.repeat(np.asarray(r0, np.int64), s)
    C0, W = np.tile(cs, n), np.tile(widths, n)
    out = (R0, np.ones_like(R0), C0, W, tiles.ravel())
    moved = np.broadcast_to(widths[1:], (n, s - 1))
    sent = np.bincount(tiles[:, 0], moved.sum(1), minlength=T).astype(np.int64)
    recv = np.bincount(tiles[:, 1:].ravel(), moved.ravel(), minlength=T).astype(np.int64)
    return out, sent, recv

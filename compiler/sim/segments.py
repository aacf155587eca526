"""MATMUL's b in segments (flag F_SEG_B, isa.py): the b word is the address of a segment
table in the tile's own table blob (word 0 = nseg, then (addr, len) per segment), each
segment a range of b's columns (with F_SEG_K: of its rows) stored at its own address as a
b operand of its own. A
REPEAT may relocate a segment's addr word (a sequence member read in place), so the
words are read through the loop's relocation, as the exchange reads its table words.

The machine refuses: a table outside the blob or not 4-byte aligned, nseg < 1, a
segment of no columns (rows), lengths that do not add up to n (k), a segment but the
last that is not whole AMP output-channel groups (with F_SEG_K: input-channel groups,
and micro-panels of a panel b) (the vertex reads one pointer per group:
compiler/costs/amp.py), F_SEG_B with F_TRANSPOSE_B; each segment's address then
meets b's operand rules (matmul_kernels.py passes them to Kernels.check_operands)."""
from __future__ import annotations

import numpy as np

from .. import isa
from .fault import first_fault
from .memory import I64


def _hex(x) -> str:
    return hex(int(x))


def read_segments(k, step, tiles, pcs, word, N, group, transpose, axis="column"):
    """Segments of a round of F_SEG_B MATMULs (b words `word`, length `N` along the
    segmented axis (n, or k with F_SEG_K), the quantum `group` of every segment but the
    last, per instance). Returns (inst, start, len, addr) per segment, in instance then
    axis order (int64 arrays)."""
    m = k.m
    ff = lambda bad, msg: first_fault(bad, msg, tiles, step, pcs)
    ff(transpose, lambda i: "MATMUL b cannot be both segmented (F_SEG_B) and transposed (F_TRANSPOSE_B)")
    t0, tl = k.tables
    lo, hi = t0[tiles], t0[tiles] + tl[tiles]
    where = lambda i: f"MATMUL segment table at {_hex(word[i])} (F_SEG_B)"
    ff((word % 4 != 0) | (word < lo) | (word + 4 > hi),
       lambda i: f"{where(i)} is not an aligned word of the tile's table blob [{_hex(lo[i])}, {_hex(hi[i])})")
    nseg = m.read_words(tiles, word, 1)[:, 0]
    ff((nseg < 1) | (nseg > N),
       lambda i: f"{where(i)} holds {nseg[i]} segments for {N[i]} {axis}s")
    end = word + isa.seg_table_bytes(nseg)
    ff(end > hi, lambda i: f"{where(i)}: its {nseg[i]} entries run past the tile's table blob ({_hex(hi[i])})")
    inst = np.repeat(np.arange(len(tiles)), nseg)
    j = np.arange(len(inst)) - np.repeat(np.cumsum(nseg) - nseg, nseg)
    at = word[inst] + 4 + j * 4 * isa.SEG_WORDS
    w = m.read_words(tiles[inst], at, isa.SEG_WORDS)
    loop = getattr(k, "loop", None)
    if loop is not None:       # a relocated addr word reads as stored + i * stride
        w = loop.fix_table(m.pos(tiles[inst][:, None], at[:, None] + 4 * np.arange(isa.SEG_WORDS)), w)
    addr, ncols = w[:, 0], w[:, 1]
    last = j == nseg[inst] - 1
    sf = lambda bad, msg: first_fault(bad, msg, tiles[inst], step, pcs[inst])
    sf(ncols < 1, lambda s: f"MATMUL segment {j[s]} of the table at {_hex(word[inst[s]])} has {ncols[s]} {axis}s")
    sf(~last & (ncols % group[inst] != 0),
       lambda s: f"MATMUL segment {j[s]} ({ncols[s]} {axis}s) is not whole {'out' if axis == 'column' else 'in'}put-"
                 f"channel groups (and panels) of {group[inst[s]]}: the AMP reads one weight pointer per group")
    col = np.cumsum(ncols) - ncols
    col -= np.repeat(col[np.cumsum(nseg) - nseg], nseg)
    total = np.bincount(inst, ncols, len(tiles)).astype(I64)
    ff(total != N, lambda i: f"{where(i)}: its segments hold {total[i]} {axis}s, the MATMUL has {N[i]}")
    return inst, col, ncols, addr

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


def _entries(k, step, tiles, pcs, word, most, words: int, where, of: str, what: str = "segments"):
    """A round's segment tables: word 0 = nseg (1 .. `most`), then nseg entries of `words`
    words, in the tile's table blob; entries read through the running loop's relocation.
    Returns (inst, j, nseg, entry words [.., words])."""
    m = k.m
    ff = lambda bad, msg: first_fault(bad, msg, tiles, step, pcs)
    t0, tl = k.tables
    lo, hi = t0[tiles], t0[tiles] + tl[tiles]
    ff((word % 4 != 0) | (word < lo) | (word + 4 > hi),
       lambda i: f"{where(i)} is not an aligned word of the tile's table blob [{_hex(lo[i])}, {_hex(hi[i])})")
    nseg = m.read_words(tiles, word, 1)[:, 0]
    ff((nseg < 1) | (nseg > most), lambda i: f"{where(i)} holds {nseg[i]} {what} for {most[i]} {of}")
    ff(word + isa.seg_table_bytes(nseg, words) > hi,
       lambda i: f"{where(i)}: its {nseg[i]} entries run past the tile's table blob ({_hex(hi[i])})")
    inst = np.repeat(np.arange(len(tiles)), nseg)
    j = np.arange(len(inst)) - np.repeat(np.cumsum(nseg) - nseg, nseg)
    at = word[inst] + 4 + j * 4 * words
    w = m.read_words(tiles[inst], at, words)
    loop = getattr(k, "loop", None)
    if loop:                   # a relocated addr word reads as stored + i * stride (none outside a loop)
        w = loop.fix_table(m.pos(tiles[inst][:, None], at[:, None] + 4 * np.arange(words)), w)
    return inst, j, nseg, w


def read_segments(k, step, tiles, pcs, word, N, group, transpose, axis="column"):
    """Segments of a round of F_SEG_B MATMULs (b words `word`, length `N` along the
    segmented axis (n, or k with F_SEG_K), the quantum `group` of every segment but the
    last, per instance). Returns (inst, start, len, addr) per segment, in instance then
    axis order (int64 arrays)."""
    ff = lambda bad, msg: first_fault(bad, msg, tiles, step, pcs)
    ff(transpose, lambda i: "MATMUL b cannot be both segmented (F_SEG_B) and transposed (F_TRANSPOSE_B)")
    where = lambda i: f"MATMUL segment table at {_hex(word[i])} (F_SEG_B)"
    inst, j, nseg, w = _entries(k, step, tiles, pcs, word, N, isa.SEG_WORDS, where, f"{axis}s")
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


def read_rects(k, step, tiles, pcs, word, K, N, qk, qn):
    """Segments of a round of F_SEG_B | F_SEG_2D MATMULs (isa.py): rectangles (addr, r0,
    c0, rows, cols) of each instance's b [K, N]; every edge on a multiple of the quanta
    (qk rows: in-channel groups and panels; qn columns: out-channel groups) or at K (N),
    tiling b exactly. Returns (inst, r0, c0, rows, cols, addr) per segment, in table order."""
    ff = lambda bad, msg: first_fault(bad, msg, tiles, step, pcs)
    where = lambda i: f"MATMUL segment table at {_hex(word[i])} (F_SEG_2D)"
    units = -(-K // qk) * -(-N // qn)
    inst, j, nseg, w = _entries(k, step, tiles, pcs, word, units, isa.SEG2_WORDS, where, "group blocks",
                                "rectangles")
    addr, r0, c0, rl, cl = (w[:, x].astype(I64) for x in range(5))
    Ki, Ni, gk, gn = K[inst], N[inst], qk[inst], qn[inst]
    sf = lambda bad, msg: first_fault(bad, msg, tiles[inst], step, pcs[inst])
    box = lambda s: f"MATMUL segment {j[s]} (rows {r0[s]}+{rl[s]}, columns {c0[s]}+{cl[s]}) of the table at " \
                    f"{_hex(word[inst[s]])}"
    sf((rl < 1) | (cl < 1) | (r0 + rl > Ki) | (c0 + cl > Ni), lambda s: f"{box(s)} is empty or outside b "
                                                                         f"[{Ki[s]}, {Ni[s]}]")
    sf((r0 % gk != 0) | (c0 % gn != 0) | (((r0 + rl) % gk != 0) & (r0 + rl != Ki))
       | (((c0 + cl) % gn != 0) & (c0 + cl != Ni)),
       lambda s: f"{box(s)} is not whole channel-group blocks of {gk[s]} x {gn[s]}: the AMP reads one weight "
                 f"pointer per (in-group, out-group) block")
    area = np.bincount(inst, rl * cl, len(tiles)).astype(I64)
    ff(area != K * N, lambda i: f"{where(i)}: its rectangles hold {area[i]} elements, b has {K[i] * N[i]}")
    # equal area and aligned edges: tiling exactly <=> no group block covered twice
    un = -(-N // qn)
    base = np.cumsum(units) - units
    nk, nn = -(-rl // gk), -(-cl // gn)
    cnt = nk * nn
    s_of = np.repeat(np.arange(len(inst)), cnt)
    e = np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    cell = base[inst][s_of] + (r0[s_of] // gk[s_of] + e // nn[s_of]) * un[inst][s_of] + c0[s_of] // gn[s_of] \
        + e % nn[s_of]
    hits = np.bincount(cell, minlength=int(units.sum()))
    twice = np.bincount(inst[s_of][hits[cell] > 1], minlength=len(tiles)) > 0
    ff(twice, lambda i: f"{where(i)}: its rectangles overlap (a group block read twice, another never)")
    return inst, r0, c0, rl, cl, addr

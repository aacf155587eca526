"""REPEAT count, body, reloc, nreloc: a counted loop over whole supersteps.

All tiles issue REPEAT together as the first instruction of a superstep, with
equal counts and an equal number of SYNCs per iteration, so the machine keeps one
state per running loop: per-tile body bounds [start, end) (pcs) and one iteration
index i shared by every tile. The body runs in the same superstep rounds as any
code; when every tile stops at the body's final SYNC, the iteration ends (after
that superstep's exchange), and pc goes back to start until count iterations
have run.

Loops nest (a spatial pipeline: a loop over pipeline steps around a loop over a
group's layers): a REPEAT inside a body pushes a loop whose body lies inside the
enclosing one (it may end on the same SYNC; then the inner loop's last iteration
ends an iteration of the outer one too). `Nest` is the stack of running loops.

Relocation: during iteration i, a fetched code word or exchange-table word
listed in the tile's relocation table reads as (stored + i * stride) mod 2**32;
under nested loops, a word listed by several reads the sum of their terms; memory is
never changed. The table is read once, when REPEAT executes, into
sorted lookup keys, so an iteration costs one searchsorted per fetched round of
instructions (and per exchange) -- O(instructions), never a re-decode of bytes.
"""
from __future__ import annotations

import numpy as np

from .. import isa
from .fault import MachineFault, first_fault
from .memory import I64

MASK32 = np.uint64(0xFFFFFFFF)


def _hex(x) -> str:
    return hex(int(x))


def mode(x: np.ndarray):
    v, c = np.unique(x, return_counts=True)
    return v[np.argmax(c)]


def mismatch(bad, tiles, step, pcs, what: str):
    """Fault naming the first tile that disagrees with the majority."""
    first_fault(bad, lambda i: f"REPEAT mismatch across tiles (deadlock): {what(i)}", tiles, step, pcs)


def _lookup(keys: np.ndarray, q: np.ndarray):
    """Indices into sorted `keys` of queries q, and a hit mask."""
    if len(keys) == 0:
        return np.zeros(len(q), I64), np.zeros(len(q), bool)
    idx = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    return idx, keys[idx] == q


class Loop:
    def __init__(self, start, end, count, code_keys, code_stride, mb, tab_keys, tab_stride):
        self.start, self.end, self.count = start, end, count
        self.i = 0
        self.code_keys, self.code_stride, self.mb = code_keys, code_stride, mb   # key = tile*mb + body pc
        self.tab_keys, self.tab_stride = tab_keys, tab_stride                     # key = flat position
        self.tab_memo = {}        # EXCH rows key -> (relocated word indices, their strides)

    @staticmethod
    def _add(words, stride, i):
        return ((words.astype(np.uint64) + np.uint64(i) * stride.astype(np.uint64)) & MASK32).astype(I64)

    def fix_fetch(self, tiles, pc, w):
        """Relocate fetched instructions w[n, INSTR_WORDS] of `tiles` at `pc` in place."""
        if self.i == 0 or len(self.code_keys) == 0:
            return w
        idx, hit = _lookup(self.code_keys, tiles * self.mb + (pc - self.start[tiles]))
        if hit.any():
            w[hit] = self._add(w[hit], self.code_stride[idx[hit]], self.i)
        return w

    def fix_table(self, pos, words, key=None):
        """Relocate exchange-table words (words int64[n, k] contiguous) in place, at flat
        positions pos[n, k] (or a function making them, called only when needed). `key`
        names the positions (the same key, the same positions: the same EXCH rows), so
        their lookup is done once per loop, not once per iteration."""
        if self.i == 0 or len(self.tab_keys) == 0:
            return words
        found = self.tab_memo.get(key) if key is not None else None
        if found is None:
            pos = pos() if callable(pos) else pos
            idx, hit = _lookup(self.tab_keys, pos.reshape(-1))
            hit = np.flatnonzero(hit)
            found = (hit, self.tab_stride[idx[hit]])
            if key is not None:
                self.tab_memo[key] = found
        hit, stride = found
        if len(hit):
            flat = words.reshape(-1)
            flat[hit] = self._add(flat[hit], stride, self.i)
        return words

def start(mach, step, tiles, pc, w) -> Loop:
    """Validate the REPEAT every tile in `tiles` (all of them) fetched at pc, and
    build the loop state. Static checks on the stored body and table; the run
    loop repeats the cheap checks dynamically."""
    m = mach.m
    count, body, reloc, nreloc = (w[:, j] for j in range(1, 5))
    ff = lambda bad, msg: first_fault(bad, msg, tiles, step, pc)
    mc = mode(count)
    mismatch(count != mc, tiles, step, pc,
             lambda i: f"tile {tiles[i]} repeats {count[i]} times, the other tiles {mc} times")
    ff((count < 1) | (count >= 2**31), lambda i: f"REPEAT count {count[i]} is not in [1, 2**31)")
    ff((body < 1) | (body > m.tile_bytes // isa.INSTR_BYTES),
       lambda i: f"REPEAT body of {body[i]} instructions is not a valid size")
    ff(nreloc > m.tile_bytes // isa.RELOC_BYTES, lambda i: f"REPEAT nreloc = {nreloc[i]} is out of range")
    s, e = pc + 1, pc + 1 + body
    ca = mach.code_addr[tiles]
    ff(ca + e * isa.INSTR_BYTES > m.r0,
       lambda i: f"REPEAT body [{_hex(ca[i] + s[i] * isa.INSTR_BYTES)}, {_hex(ca[i] + e[i] * isa.INSTR_BYTES)}) "
                 f"runs past region 0 ({_hex(m.r0)})")

    # ---- the body as stored: ends with SYNC, no END / REPEAT, equal SYNC counts ----
    bt = np.repeat(np.arange(len(tiles)), body)                    # instance of each body instruction
    bj = np.arange(len(bt)) - np.repeat(np.cumsum(body) - body, body)
    bpc = s[bt] + bj
    op = m.read_words(tiles[bt], ca[bt] + bpc * isa.INSTR_BYTES, 1)[:, 0] & 0xFF
    bad = op == isa.END
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise MachineFault(f"END inside a REPEAT body at pc {bpc[k]}", tile=tiles[bt[k]], step=step, pc=pc[bt[k]])
    last = op[np.cumsum(body) - 1]
    ff(last != isa.SYNC, lambda i: f"REPEAT body [pc {s[i]}, {e[i]}) does not end with SYNC")
    nsync = np.bincount(bt, op == isa.SYNC, len(tiles)).astype(I64)
    ms = mode(nsync)
    mismatch(nsync != ms, tiles, step, pc,
             lambda i: f"tile {tiles[i]}'s REPEAT body has {nsync[i]} SYNCs per iteration, "
                       f"the other tiles' {ms}")

    # ---- relocation table ------------------------------------------------------------
    live = nreloc > 0
    ff(live & (reloc % 4 != 0), lambda i: f"REPEAT relocation table at {_hex(reloc[i])} is not 4-byte aligned")
    ff(live & ~m.in_range(reloc, nreloc * isa.RELOC_BYTES),
       lambda i: f"REPEAT relocation table [{_hex(reloc[i])}, {_hex(reloc[i] + nreloc[i] * isa.RELOC_BYTES)}) "
                 f"is out of range [{_hex(m.base)}, {_hex(m.end)})")
    rt = np.repeat(np.arange(len(tiles)), nreloc)
    rj = np.arange(len(rt)) - np.repeat(np.cumsum(nreloc) - nreloc, nreloc)
    rw = m.read_words(tiles[rt], reloc[rt] + rj * isa.RELOC_BYTES, isa.RELOC_WORDS)
    addr, stride = rw[:, 0], rw[:, 1]
    own, opc = tiles[rt], pc[rt]
    fr = lambda bad, msg: first_fault(bad, lambda k: f"REPEAT relocation entry {rj[k]} names word "
                                                     f"{_hex(addr[k])}: {msg(k)}", own, step, opc)
    fr(addr % 4 != 0, lambda k: "not 4-byte aligned")
    c0, cl = mach.code_addr[own], mach.code_len[own]
    t0, tl = mach.table_addr[own], mach.table_len[own]
    in_code = (addr >= c0) & (addr < c0 + cl)
    in_tab = (addr >= t0) & (addr < t0 + tl)
    fr(~in_code & ~in_tab,
       lambda k: f"outside the tile's code [{_hex(c0[k])}, {_hex(c0[k] + cl[k])}) and exchange table "
                 f"[{_hex(t0[k])}, {_hex(t0[k] + tl[k])})")
    wpc, word = (addr - c0) // isa.INSTR_BYTES, (addr - c0) % isa.INSTR_BYTES // 4
    in_body = in_code & (wpc >= s[rt]) & (wpc < e[rt]) & (word > 0)
    fr(in_code & ~in_tab & ~in_body,
       lambda k: f"code word {word[k]} of pc {wpc[k]}, not an argument word of the REPEAT body "
                 f"[pc {s[rt][k]}, {e[rt][k]})")
    pos = m.pos(own, addr)
    u, cnt = np.unique(pos, return_counts=True)
    dup = np.isin(pos, u[cnt > 1])
    fr(dup, lambda k: "relocated twice")

    mb = int(body.max()) + 1
    T = mach.T
    s_full, e_full = np.zeros(T, I64), np.zeros(T, I64)
    s_full[tiles], e_full[tiles] = s, e
    # code: one row of INSTR_WORDS strides per relocated body instruction
    ck = own[in_body] * mb + (wpc[in_body] - s[rt][in_body])
    keys, inv = np.unique(ck, return_inverse=True)
    cs = np.zeros((len(keys), isa.INSTR_WORDS), I64)
    cs[inv.reshape(-1), word[in_body]] = stride[in_body]
    o = np.argsort(pos[in_tab])
    return Loop(s_full, e_full, int(mc), keys, cs, mb, pos[in_tab][o], stride[in_tab][o])


class Nest:
    """The running loops, outermost first. A word listed by several loops' tables
    reads as stored + the sum of their i * stride (each loop's own lookup)."""

    def __init__(self):
        self.loops: list[Loop] = []

    def __bool__(self):
        return bool(self.loops)

    @property
    def top(self) -> Loop:
        return self.loops[-1]

    def fix_fetch(self, tiles, pc, w):
        for lp in self.loops:
            w = lp.fix_fetch(tiles, pc, w)
        return w

    def fix_table(self, pos, words, key=None):
        if callable(pos) and len(self.loops) > 1:
            pos = pos()
        for lp in self.loops:
            words = lp.fix_table(pos, words, key)
        return words

"""The exchange phase of a superstep.

Every EXCH of the step is performed together at the step's sync: each tile's
send and receive entries are decoded from its memory (nsend send entries then
nrecv receive entries at table_addr, isa.ENTRY_WORDS words each), sends s->d are
matched with receives on d from s in table order, each matched pair must carry
the same bytes, and then all source bytes are read before any destination is
written (bulk-synchronous). Row shapes may differ between the two sides
(a reshaping transfer): memory.plan_chunks splits them into common chunks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import isa
from .fault import first_fault
from .memory import I64, Memory, extent, move, plan_chunks


def _hex(x) -> str:
    return hex(int(x))


@dataclass
class ExchangeResult:
    send_bytes: np.ndarray   # int64[tiles]
    recv_bytes: np.ndarray   # int64[tiles]

    @property
    def total(self) -> int:
        return int(self.send_bytes.sum())


def _ordinal(key: np.ndarray) -> np.ndarray:
    """Position of each element among equal keys, in array order."""
    order = np.argsort(key, kind="stable")
    ks = key[order]
    start = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    first = np.repeat(start, np.diff(np.r_[start, len(ks)]))
    out = np.empty(len(key), I64)
    out[order] = np.arange(len(key)) - first
    return out


def exchange(m: Memory, step: int, tile, pc, taddr, nsend, nrecv, fix=None) -> ExchangeResult:
    """tile, pc, taddr, nsend, nrecv: one row per EXCH executed in this step, in
    the order each tile executed them. fix(pos[n, ENTRY_WORDS], words) relocates
    table words read inside a REPEAT (repeat.Loop.fix_table)."""
    T = m.tiles
    o = np.argsort(tile, kind="stable")     # a tile's entries in its program order
    tile, pc, taddr, nsend, nrecv = (np.asarray(x, I64)[o] for x in (tile, pc, taddr, nsend, nrecv))
    ff = lambda bad, msg, tl=tile, pcs=pc: first_fault(bad, msg, tl, step, pcs)

    nent = nsend + nrecv
    ff((nsend > m.tile_bytes) | (nrecv > m.tile_bytes),
       lambda i: f"EXCH of {nsend[i]} send + {nrecv[i]} receive entries is out of range")
    ff(taddr % 4 != 0, lambda i: f"EXCH table at {_hex(taddr[i])} is not 4-byte aligned")
    ff(~m.in_range(taddr, nent * isa.ENTRY_BYTES),
       lambda i: f"EXCH table [{_hex(taddr[i])}, {_hex(taddr[i] + nent[i] * isa.ENTRY_BYTES)}) is out of range "
                 f"[{_hex(m.base)}, {_hex(m.end)})")

    inst = np.repeat(np.arange(len(tile)), nent)
    j = np.arange(len(inst)) - np.repeat(np.cumsum(nent) - nent, nent)
    words = m.read_words(tile[inst], taddr[inst] + j * isa.ENTRY_BYTES, isa.ENTRY_WORDS)
    if fix is not None:
        pos = m.pos(tile[inst], taddr[inst] + j * isa.ENTRY_BYTES)[:, None] + 4 * np.arange(isa.ENTRY_WORDS)
        words = fix(pos, words)
    is_send = j < nsend[inst]
    own, own_pc = tile[inst], pc[inst]
    peer, addr, rb, rows, stride = (words[:, c] for c in range(5))

    kind = np.where(is_send, "send", "receive")
    ff2 = lambda bad, msg: first_fault(bad, msg, own, step, own_pc)
    ff2(peer >= T, lambda i: f"EXCH {kind[i]} entry {j[i]} names tile {peer[i]} (the machine has {T})")
    ff2((rb > m.tile_bytes) | (rows > m.tile_bytes) | (stride > m.tile_bytes),
        lambda i: f"EXCH {kind[i]} entry {j[i]} ({rows[i]} rows of {rb[i]} B, stride {stride[i]}) is out of range")
    ext = extent(rb, rows, stride)
    ff2((rb * rows > 0) & ~m.in_range(addr, ext),
        lambda i: f"EXCH {kind[i]} entry {j[i]} [{_hex(addr[i])}, {_hex(addr[i] + ext[i])}) is out of range "
                  f"[{_hex(m.base)}, {_hex(m.end)})")

    # pair key = src_tile * T + dst_tile on both sides
    src_t = np.where(is_send, own, peer)
    dst_t = np.where(is_send, peer, own)
    key = src_t * T + dst_t
    S, R = np.flatnonzero(is_send), np.flatnonzero(~is_send)
    ks, kr = key[S], key[R]
    us, cs = np.unique(ks, return_counts=True)
    ur, cr = np.unique(kr, return_counts=True)
    allk = np.union1d(us, ur)
    ns_ = np.zeros(len(allk), I64)
    nr_ = np.zeros(len(allk), I64)
    ns_[np.searchsorted(allk, us)] = cs
    nr_[np.searchsorted(allk, ur)] = cr
    bad = ns_ != nr_
    if bad.any():
        k = int(allk[np.flatnonzero(bad)[0]])
        s, d = divmod(k, T)
        i = int(np.flatnonzero(key == k)[0])   # blame an EXCH that names the pair
        first_fault([True], lambda _: f"exchange mismatch: tile {s} sends {ns_[allk == k][0]} entries to "
                                      f"tile {d}, which receives {nr_[allk == k][0]} from it",
                    [own[i]], step, [own_pc[i]])

    # matched pairs: same pair key, same ordinal (table order on each side)
    S = S[np.lexsort((_ordinal(ks), ks))]
    R = R[np.lexsort((_ordinal(kr), kr))]
    nb = rb * rows
    first_fault(nb[S] != nb[R],
                lambda i: f"exchange mismatch: tile {src_t[S[i]]} send entry {j[S[i]]} carries {nb[S[i]]} B to "
                          f"tile {dst_t[S[i]]}, whose matching receive entry {j[R[i]]} expects {nb[R[i]]} B",
                own[S], step, own_pc[S])

    sp, dp, L = plan_chunks(m.pos(own[S], addr[S]), rb[S], rows[S], stride[S],
                            m.pos(own[R], addr[R]), rb[R], rows[R], stride[R])
    move(m.flat, m.flat, sp, dp, L)
    return ExchangeResult(np.bincount(own[S], nb[S], T).astype(I64),
                          np.bincount(own[R], nb[R], T).astype(I64))

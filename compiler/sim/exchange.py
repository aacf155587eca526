"""The exchange phase of a superstep.

Every EXCH of the step is performed together at the step's sync: each tile's
send and receive entries are decoded from its memory (nsend send entries then
nrecv receive entries at table_addr, isa.ENTRY_WORDS words each), sends s->d are
matched with receives on d from s in table order, each matched pair must carry
the same bytes, and then all source bytes are read before any destination is
written (bulk-synchronous). Row shapes may differ between the two sides
(a reshaping transfer): memory.chunk_offsets splits them into common chunks.

A multicast send entry (isa.MCAST in its peer word) is one send to each tile of its
receiver list (read from the table blob at the EXCH's table address + the word's low
31 bits: k >= 2, then k distinct tiles): each copy is matched with a receive like any
send, and the sender is charged the entry's bytes once (_receivers).

A Repeat body runs the same exchanges every iteration with only the relocated
addresses changed, so the matching and the chunking (a Plan: offsets from each
entry's address) are kept in a cache keyed by the EXCH rows and reused when the
entries' words -- read from tile memory every time -- agree on everything but
their addresses; the address checks and the byte moves run every time. A plan also
keeps what the EXCH rows alone fix (where the table words are, each entry's tile and
extent), so a cached exchange reads its words, checks addresses and moves bytes
(memory.move_pairs: chunk positions made in the compiled loop from each pair's two
addresses; only chunks whose source some destination may touch are staged).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import isa
from .fault import first_fault
from .memory import I64, Memory, chunk_offsets, extent, gather, move_pairs, write_order


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


@dataclass
class Plan:
    """What an exchange's table words fix apart from their addresses."""
    shape: np.ndarray        # uint32[n, 4]: peer, row_bytes, rows, stride of every entry (table words)
    S: np.ndarray            # matched send entries ...
    R: np.ndarray            # ... and their receives, pair by pair
    chunk: np.ndarray        # pair of each chunk
    soff: np.ndarray         # chunk offsets from the send's address ...
    doff: np.ndarray         # ... and from the receive's address
    length: np.ndarray       # chunk lengths
    order: np.ndarray        # the write order (memory.write_order): by length, those into tiles < T // 2 first
    n_lo: int                # ... how many of those
    send_bytes: np.ndarray   # int64[tiles]
    recv_bytes: np.ndarray
    # the EXCH rows' entries (fixed by the cache key): instance and index of each entry, the
    # flat position of its table words, send or receive; and what its shape fixes: its
    # extent, the entries that move bytes, each pair's extents and tiles (as the flat
    # position of address 0 on them). Small integers as int32: a plan is kept per EXCH set
    inst: np.ndarray = None
    j: np.ndarray = None
    tpos: np.ndarray = None
    is_send: np.ndarray = None
    ext: np.ndarray = None
    live: np.ndarray = None
    s_at: np.ndarray = None
    d_at: np.ndarray = None
    s_ext: np.ndarray = None
    d_ext: np.ndarray = None

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.shape, self.S, self.R, self.chunk, self.soff, self.doff, self.length,
                                      self.order, self.inst, self.j, self.tpos, self.is_send, self.ext,
                                      self.live, self.s_at, self.d_at, self.s_ext, self.d_ext)
                   if a is not None)


class PlanCache(dict):
    """EXCH rows key -> Plan, bounded in bytes (oldest dropped first)."""

    def __init__(self, max_bytes: int = 256 << 20):
        super().__init__()
        self.max_bytes, self.bytes = max_bytes, 0

    def put(self, key, plan: Plan):
        if plan.nbytes > self.max_bytes:
            return
        while self and self.bytes + plan.nbytes > self.max_bytes:
            self.bytes -= self.pop(next(iter(self))).nbytes
        self[key] = plan
        self.bytes += plan.nbytes


def exchange(m: Memory, step: int, tile, pc, taddr, nsend, nrecv, fix=None, cache: PlanCache | None = None
             ) -> ExchangeResult:
    """tile, pc, taddr, nsend, nrecv: one row per EXCH executed in this step, in
    the order each tile executed them. fix(pos, words, key) relocates
    table words read inside a REPEAT (repeat.Loop.fix_table; pos: a function giving the words'
    flat positions [n, ENTRY_WORDS]). cache: Plans to reuse."""
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

    key = b"".join(x.tobytes() for x in (tile, taddr, nsend, nrecv))
    plan = cache.get(key) if cache is not None else None
    if plan is not None:   # the same EXCH rows: the same entries at the same table positions
        inst, j, tpos, is_send = plan.inst, plan.j, plan.tpos, plan.is_send
    else:
        inst = np.repeat(np.arange(len(tile)), nent)
        j = np.arange(len(inst)) - np.repeat(np.cumsum(nent) - nent, nent)
        tpos = m.pos(tile[inst], taddr[inst] + j * isa.ENTRY_BYTES)
        is_send = j < nsend[inst]
    words = gather(m.flat, tpos, isa.ENTRY_BYTES).view("<u4").astype(I64)
    if fix is not None:
        words = fix(lambda: tpos[:, None] + 4 * np.arange(isa.ENTRY_WORDS), words, key)
    inst_r, j_r, tpos_r, is_send_r = inst, j, tpos, is_send     # the table's own entries (a Plan keeps them)
    charge = None
    mc = is_send & (words[:, 0] >= isa.MCAST)
    if mc.any():                             # multicast: one virtual send per listed receiver
        rep, peers = _receivers(m, step, words, mc, taddr[inst], tile[inst], pc[inst], j)
        words = words[rep]
        words[:, 0] = peers
        inst, j, is_send = inst[rep], j[rep], is_send[rep]
        charge = np.r_[True, rep[1:] != rep[:-1]]                # the sender pays each entry once
    own = lambda: tile[inst]                 # the entries' tiles, pcs: for a fault's text
    addr = words[:, 1]
    shape = words[:, [0, 2, 3, 4]]
    if plan is not None and not np.array_equal(plan.shape, shape):
        plan = None

    kind = lambda i: "send" if is_send[i] else "receive"
    ff2 = lambda bad, msg: bad.any() and first_fault(bad, msg, own(), step, pc[inst])
    if plan is None:      # a cached plan's entries passed these checks with these very words
        peer, rb, rows, stride = (shape[:, c] for c in range(4))
        ff2(peer >= T, lambda i: f"EXCH {kind(i)} entry {j[i]} names tile {peer[i]} (the machine has {T})")
        ff2((rb > m.tile_bytes) | (rows > m.tile_bytes) | (stride > m.tile_bytes),
            lambda i: f"EXCH {kind(i)} entry {j[i]} ({rows[i]} rows of {rb[i]} B, stride {stride[i]}) "
                      f"is out of range")
        ext = extent(rb, rows, stride)
        live = np.flatnonzero(rb * rows > 0)
    else:
        ext, live = plan.ext, plan.live
    bad = ~m.in_range(addr[live], ext[live])
    if bad.any():
        i = int(live[np.flatnonzero(bad)[0]])
        first_fault([True], lambda _: f"EXCH {kind(i)} entry {j[i]} [{_hex(addr[i])}, {_hex(addr[i] + ext[i])}) "
                                      f"is out of range [{_hex(m.base)}, {_hex(m.end)})",
                    [own()[i]], step, [pc[inst][i]])
    if plan is None:
        ent = own()
        plan = _plan(T, step, shape, is_send, ent, pc[inst], j, charge)
        i32 = lambda a: a.astype(np.int32)
        plan.inst, plan.j, plan.tpos, plan.is_send = i32(inst_r), i32(j_r), tpos_r, is_send_r
        plan.ext, plan.live = i32(ext), i32(live)
        S, R = plan.S, plan.R
        plan.s_at, plan.d_at = m.pos(ent[S], 0), m.pos(ent[R], 0)   # + address: flat position
        plan.s_ext, plan.d_ext = i32(ext[S]), i32(ext[R])
        if cache is not None:
            cache.put(key, plan)
    S, R = plan.S, plan.R
    move_pairs(m.flat, T, m.tile_bytes, plan.s_at + addr[S], plan.s_ext, plan.d_at + addr[R], plan.d_ext,
               plan.chunk, plan.soff, plan.doff, plan.length, plan.order, plan.n_lo)
    return ExchangeResult(plan.send_bytes, plan.recv_bytes)


def _receivers(m: Memory, step, words, mc, taddr, tl, pcs, j):
    """The receiver lists of multicast send entries `mc` (words: [n, ENTRY_WORDS] table
    words; taddr, tl, pcs: each entry's EXCH table address, tile and pc). Returns rep
    (entry of each virtual send, ascending) and its peer: a list's k tiles in order,
    every other entry its own peer word. Refuses a list out of range or misaligned, with
    fewer than 2 or more than `tiles` receivers, naming a tile the machine lacks, or a
    tile twice."""
    T = m.tiles
    i = np.flatnonzero(mc)
    la = taddr[i] + (words[i, 0] - isa.MCAST)
    ff = lambda bad, msg: first_fault(bad, msg, tl[i], step, pcs[i])
    ff((la % 4 != 0) | ~m.in_range(la, 4),
       lambda q: f"EXCH multicast send entry {j[i[q]]}: receiver list at {_hex(la[q])} is misaligned or out of "
                 f"range [{_hex(m.base)}, {_hex(m.end)})")
    k = m.read_words(tl[i], la, 1)[:, 0]
    ff((k < 2) | (k > T) | ~m.in_range(la, 4 + 4 * np.minimum(k, T)),
       lambda q: f"EXCH multicast send entry {j[i[q]]}: receiver list at {_hex(la[q])} of {k[q]} tiles "
                 f"(2 .. {T}, within [{_hex(m.base)}, {_hex(m.end)}))")
    owner = np.repeat(np.arange(len(i)), k)
    q = np.arange(len(owner)) - np.repeat(np.cumsum(k) - k, k)
    peer = gather(m.flat, m.pos(tl[i][owner], la[owner] + 4 + 4 * q), 4).view("<u4").ravel().astype(I64)
    bad = np.zeros(len(i), bool)
    bad[owner[peer >= T]] = True
    ff(bad, lambda r: f"EXCH multicast send entry {j[i[r]]} lists tile "
                      f"{peer[owner == r][peer[owner == r] >= T][0]} (the machine has {T})")
    key = np.sort(owner * T + peer)
    twice = key[1:][key[1:] == key[:-1]]
    bad[:] = False
    bad[twice // T] = True
    ff(bad, lambda r: f"EXCH multicast send entry {j[i[r]]} lists tile "
                      f"{twice[twice // T == r][0] % T} twice")
    cnt = np.ones(len(words), I64)
    cnt[i] = k
    rep = np.repeat(np.arange(len(words)), cnt)
    out = words[rep, 0].copy()
    out[np.repeat(mc, cnt)] = peer
    return rep, out


def _plan(T, step, shape, is_send, own, own_pc, j, charge=None) -> Plan:
    """Match sends with receives (same pair of tiles, same ordinal in table order on
    each side; equal byte counts) and split every pair into chunks. charge: per entry,
    whether its bytes count for its sender (a multicast entry's copies after the first
    do not); None: every entry's do."""
    peer, rb, rows, stride = (shape[:, c] for c in range(4))
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
    c, so, do, L = chunk_offsets(rb[S], rows[S], stride[S], rb[R], rows[R], stride[R])
    order, n_lo = write_order(L, own[R][c] < T // 2)     # a chunk stays in its receive's tile
    i32 = lambda a: a.astype(np.int32)     # offsets within a tile, indices: a cached plan stays small
    return Plan(shape.astype(np.uint32), i32(S), i32(R), i32(c), i32(so), i32(do), i32(L), order, n_lo,
                np.bincount(own[S], nb[S] if charge is None else nb[S] * charge[S], T).astype(I64),
                np.bincount(own[R], nb[R], T).astype(I64))

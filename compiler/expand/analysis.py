"""Analysis of a tile graph before placement: encoded sizes, cycles, footprint and
encodability, each per tile with numpy. A candidate that cannot fit is rejected
here, not after placement.

The cycle figures apply the target's cost functions to exactly the kernels and
transfers the program will execute, so the simulator must reproduce them (a test
holds it to that); compiler/sim/oracle.py re-derives them without target.py's cost
functions. An exchange phase is costed per tile (target.exchange_cycles: each tile
sends and receives at its own rate, no pair bonus). With tg.bcast (policy.broadcast_sends)
the transfers of one step that send the same source range to several tiles are one
multicast send (isa.MCAST): its sender is charged the bytes once (send_leaders)."""
from __future__ import annotations

import hashlib
import weakref

import numpy as np

from .. import isa
from ..target import INTERLEAVED, STANDARD, Target
from .layout import pad
from .tilegraph import TileGraph


def _per_tile(tiles: int, idx, w=None) -> np.ndarray:
    return np.bincount(np.asarray(idx, np.int64), weights=w, minlength=tiles).astype(np.int64)


def kernel_cycles(tg: TileGraph, t: Target) -> np.ndarray:
    """Cycles of every kernel run, from target.py (the simulator applies the same)."""
    k = tg.kern
    cyc = np.zeros(len(k["tile"]), np.int64)
    dt, dt2 = k["dtype"] & 0xFF, (k["dtype"] >> 8) & 0xFF
    f32o = ((k["dtype"] >> 16) & isa.F_F32_OUT) != 0          # MATMUL: f32 partials, no cast
    for code, name in isa.DTYPE_NAMES.items():
        for code2, name2 in [(0, name)] + list(isa.DTYPE_NAMES.items()):
            mm = (k["op"] == isa.MATMUL) & (dt == code) & (dt2 == code2)
            if mm.any():
                cyc[mm] = t.matmul_cycles(k["i0"][mm], k["i1"][mm], k["i2"][mm], name, name2, f32o[mm])
    on = lambda op: k["op"] == op
    add = on(isa.ADD)
    cyc[add] = t.add_cycles(k["i1"][add], k["i0"][add], dt2[add] == isa.DTYPES["f32"])   # nelem, nsrc1
    g = on(isa.GELU)
    cyc[g] = t.gelu_cycles(k["i0"][g])
    cast = on(isa.CAST)
    src_b = np.where((k["dtype"][cast] >> 8 & 0xFF) == isa.DTYPES["fp8"], 1, 2)
    cyc[cast] = t.cast_cycles(k["i0"][cast], src_b, 3 - src_b)
    ln = on(isa.LAYERNORM)                                    # flags: policy.ln_halves' two kernels
    cyc[ln] = t.layernorm_cycles(k["i0"][ln], k["i1"][ln], k["dtype"][ln] >> 16)
    sel = on(isa.ONLINE_SOFTMAX)
    cyc[sel] = t.online_softmax_cycles(k["i0"][sel], k["i1"][sel])
    sm = on(isa.SOFTMAX)                                      # its scale's multiply unless it is 1.0
    cyc[sm] = t.softmax_cycles(k["i0"][sm], k["i1"][sm], k["i2"][sm] != isa.f32_bits(1.0),
                               (k["dtype"][sm] >> 16) & isa.F_SM_DEFER)    # flags: policy.deferred_norm
    b = on(isa.BIAS)
    cyc[b] = t.bias_cycles(k["i0"][b], k["i1"][b])
    cp = on(isa.COPY)
    cyc[cp] = t.copy_cycles(k["i0"][cp] * k["i1"][cp])        # row_bytes × rows
    rs = on(isa.ROWSCALE)
    fl = k["dtype"][rs] >> 16
    cyc[rs] = t.rowscale_cycles(k["i0"][rs], k["i1"][rs], fl & isa.F_ADD, fl & isa.F_RECIP)
    mg = on(isa.MERGE)
    cyc[mg] = t.merge_cycles(k["i0"][mg], k["i1"][mg], k["i2"][mg])
    return cyc


SOURCE = ("step", "src", "sreq", "soff", "s_row_bytes", "s_rows", "s_stride", "reloc")


def send_leaders(tg: TileGraph) -> np.ndarray:
    """Per transfer row, the row whose send entry carries its bytes: itself, or with
    tg.bcast the first row (in xfer order) of its multicast group: the rows of one step
    with the same source range (tile, request, offset, row shape, relocation), to
    distinct tiles (a tile receiving a range twice in a step gets a second group).
    Kept (_MEMO) for the tile graph while its transfers' steps stay as they were (early gathers
    move them): analysis asks four times per candidate."""
    x = tg.xfer
    n = len(x["src"])
    if not tg.bcast or n < 2:
        return np.arange(n)
    seen = hashlib.blake2b(np.ascontiguousarray(x["step"]).tobytes(), digest_size=16).digest()
    memo = _MEMO.get(id(tg))
    if memo is not None and memo[0]() is tg and memo[1] == seen:
        return memo[2]
    lead = _leaders(x, n)
    for k in [k for k, m in _MEMO.items() if m[0]() is None]:   # a dead graph's leaders: 10 MiB at 27 layers
        del _MEMO[k]
    if len(_MEMO) >= 8:
        _MEMO.clear()
    _MEMO[id(tg)] = (weakref.ref(tg), seen, lead)
    return lead


# send_leaders' memo, beside the tile graph rather than on it: the artifact codec stores a
# tile graph field by field and refuses any other attribute. id -> (weakref, steps' hash, leaders)
_MEMO: dict[int, tuple] = {}


def _packed(x) -> tuple[list, int]:
    """The source key columns and then dst, each less its minimum in as many bits as its
    range needs, packed into as few int64 words as fit 62 bits each (equal words, equal
    columns), dst in the last word's lowest bits. Returns the words and dst's bits."""
    words, used = [], 63
    for f in SOURCE + ("dst",):
        c = np.asarray(x[f], np.int64)
        c = c - c.min() if len(c) else c
        bits = max(1, int(c.max()).bit_length()) if len(c) else 1
        if bits > 62:                                          # a word of its own, as it is
            words, used = words + [np.asarray(x[f], np.int64)], 63
            continue
        if used + bits > 62:
            words.append(np.zeros(len(c), np.int64))
            used = 0
        words[-1] = (words[-1] << bits) | c
        used += bits
    return words, bits


def _leaders(x, n: int) -> np.ndarray:
    words, db = _packed(x)
    o = np.lexsort(words[::-1])                               # stable: xfer order among equals
    w = [c[o] for c in words]
    w[-1], d = w[-1] >> db, w[-1] & ((1 << db) - 1)           # the source part, dst
    new = np.r_[True, np.any([c[1:] != c[:-1] for c in w], 0)]
    start = np.flatnonzero(new)                               # source range runs, sorted order
    kid = np.cumsum(new) - 1
    again = (d[1:] == d[:-1]) & ~new[1:]                      # a tile receiving the range twice
    if not again.any():                                       # one group per range: its first row
        lead = np.empty(n, np.int64)
        lead[o] = np.minimum.reduceat(o, start)[kid]
        return lead
    pair = np.r_[True, ~again]
    run = np.flatnonzero(pair)                                # (range, dst) runs: ordinal within
    ordinal = np.arange(n) - np.repeat(run, np.diff(np.r_[run, n]))
    key = kid * n + ordinal                                   # groups (range, ordinal)
    g = np.lexsort((o, key))                                  # ... in xfer order
    gkey = key[g]
    first = np.r_[True, gkey[1:] != gkey[:-1]]
    lead = np.empty(n, np.int64)
    lead[o[g]] = o[g][np.flatnonzero(first)[np.cumsum(first) - 1]]
    return lead


def send_charge(tg: TileGraph) -> np.ndarray:
    """Bytes each transfer row charges its sender: its bytes, or 0 for a multicast
    group's rows after the first (the group's send entry is charged once)."""
    x = tg.xfer
    nb = x["s_row_bytes"] * x["s_rows"]
    return np.where(send_leaders(tg) == np.arange(len(nb)), nb, 0)


def multicast_lists(tg: TileGraph) -> tuple[np.ndarray, np.ndarray]:
    """The multicast send entries (leader rows with ≥ 2 receivers, ascending) and their
    receiver counts."""
    lead, k = np.unique(send_leaders(tg), return_counts=True)
    return lead[k > 1], k[k > 1]


def step_cycles(tg: TileGraph, t: Target) -> tuple[np.ndarray, np.ndarray]:
    """Cycles of each superstep (sync included) and per-tile cycles [steps, tiles]."""
    S, T = len(tg.steps), tg.tiles
    per_tile = np.zeros((S, T), np.int64)
    kc = kernel_cycles(tg, t)
    np.add.at(per_tile, (tg.kern["step"] - 1, tg.kern["tile"]), kc)
    steps = np.zeros(S, np.int64)
    x = tg.xfer
    nbytes = x["s_row_bytes"] * x["s_rows"]
    charge = send_charge(tg)
    for s in range(S):
        if tg.steps[s] == "exchange":
            sel = x["step"] == s + 1
            send = _per_tile(T, x["src"][sel], charge[sel])
            recv = _per_tile(T, x["dst"][sel], nbytes[sel])
            steps[s] = t.exchange_cycles(send, recv)
            per_tile[s] = np.where((send > 0) | (recv > 0), steps[s], 0)
        elif tg.steps[s] == "host":         # the chip's one host link carries every tile's rows
            steps[s] = host_step_cycles(tg, t, s + 1)
            per_tile[s, np.unique(tg.hstep["tile"][tg.hstep["step"] == s + 1])] = steps[s]
        else:
            steps[s] = per_tile[s].max(initial=0)
    return steps + t.sync_cycles, per_tile


def host_step_cycles(tg: TileGraph, t: Target, step: int) -> int:
    """A HOST superstep: the bytes of every row its HOST instructions move over the host
    link (Target.host_cycles, as the machine charges it)."""
    h = tg.hstep
    nbytes = [0, 0]
    for d, rows in ((0, tg.sin), (1, tg.sout)):
        for i in np.flatnonzero((h["step"] == step) & (h["dir"] == d)):
            sl = slice(h["first"][i], h["first"][i] + h["rows"][i])
            nbytes[d] += int((rows["row_bytes"][sl] * rows["rows"][sl]).sum())
    return t.host_cycles(*nbytes)


def code_instructions(tg: TileGraph) -> np.ndarray:
    """Instructions per tile: kernels and HOSTs, one EXCH per exchange step it takes part
    in, one SYNC per superstep, END, REPEAT before a Repeat body, and the outer REPEAT
    (tg.outer). `lower` emits exactly these (and checks it)."""
    T, x = tg.tiles, tg.xfer
    n = (_per_tile(T, tg.kern["tile"]) + _per_tile(T, tg.hstep["tile"]) + len(tg.steps) + 1 + (tg.count > 1)
         + (tg.outer > 1))
    for s in np.unique(x["step"]):
        sel = x["step"] == s
        n += np.isin(np.arange(T), np.concatenate([x["src"][sel], x["dst"][sel]]))
    return n


def table_entries(tg: TileGraph) -> np.ndarray:
    """Send entries (one per multicast group) and receive entries per tile."""
    x = tg.xfer
    lead = send_leaders(tg)
    return _per_tile(tg.tiles, x["src"][lead == np.arange(len(lead))]) + _per_tile(tg.tiles, x["dst"])


def list_bytes(tg: TileGraph) -> np.ndarray:
    """Per tile: its multicast receiver lists (isa.mcast_list_bytes), after its entries."""
    lead, k = multicast_lists(tg)
    return _per_tile(tg.tiles, tg.xfer["src"][lead], isa.mcast_list_bytes(k))


def send_reloc_entries(tg: TileGraph) -> np.ndarray:
    """Relocated source words per tile of the sends from a sequence (a multicast group's
    entry relocates once)."""
    x = tg.xfer
    sends = send_leaders(tg) == np.arange(len(x["src"]))
    return _per_tile(tg.tiles, x["src"][(x["reloc"] != 0) & sends])


def reloc_entries(tg: TileGraph) -> np.ndarray:
    """Relocated words per tile: the source address of every send from a sequence,
    the operand-1 address of every kernel reading a sequence in place, and the scale
    word of every kernel with per-iteration scales (tilegraph sseq), and the address
    word of every b segment read in place from a sequence (tilegraph bseg)."""
    k, b = tg.kern, tg.bseg
    return (send_reloc_entries(tg) + _per_tile(tg.tiles, k["tile"][k["reloc"] != 0])
            + _per_tile(tg.tiles, k["tile"][k["sseq"] != 0])
            + _per_tile(tg.tiles, k["tile"][b["kern"][b["reloc"] != 0]]))


def outer_reloc_entries(tg: TileGraph) -> np.ndarray:
    """Words per tile the outer REPEAT relocates: the delta of each HOST moving a stream item."""
    return _per_tile(tg.tiles, tg.hstep["tile"][tg.hstep["reloc"] != 0])


def scale_tables(tg: TileGraph) -> tuple[np.ndarray, np.ndarray]:
    """The (tile, sseq) pairs whose scale rows a tile's table blob holds (sorted: tile,
    then sseq), one row of `count` f32 per distinct scale sequence its kernels use."""
    k = tg.kern
    used = k["sseq"] != 0
    key = np.unique(k["tile"][used] * (len(tg.scale_seqs) + 1) + k["sseq"][used])
    return key // (len(tg.scale_seqs) + 1), key % (len(tg.scale_seqs) + 1)


def seg_tables(tg: TileGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The segmented MATMULs (kernel rows, ascending), their segment counts and words a
    segment (isa.SEG_WORDS, or SEG2_WORDS for rectangles: bseg rows > 0)."""
    kern, first, nseg = np.unique(tg.bseg["kern"], return_index=True, return_counts=True)
    return kern, nseg, np.where(tg.bseg["rows"][first] > 0, isa.SEG2_WORDS, isa.SEG_WORDS)


def table_blob_bytes(tg: TileGraph) -> np.ndarray:
    """The tile's table blob: exchange entries and multicast receiver lists, its Repeat
    relocation entries, the outer REPEAT's, its scale tables, then its MATMULs' b segment
    tables (isa.F_SEG_B)."""
    tile, _ = scale_tables(tg)
    kern, nseg, wps = seg_tables(tg)
    return (isa.table_bytes(table_entries(tg)) + list_bytes(tg)
            + (reloc_entries(tg) + outer_reloc_entries(tg)) * isa.RELOC_BYTES
            + _per_tile(tg.tiles, tile) * tg.count * isa.SCALE_BYTES
            + _per_tile(tg.tiles, tg.kern["tile"][kern], isa.seg_table_bytes(nseg, wps)))


def _span(r: dict) -> np.ndarray:
    """Bytes each request may occupy: its whole sequence extent plus alignment slack."""
    return r["stride"] * (r["count"] - 1) + r["size"] + r["align"] - 1


def live_bytes(tg: TileGraph, sz: np.ndarray | None = None) -> np.ndarray:
    """Live request bytes [tile, event] (sizes padded to alignment, or `sz` per request)."""
    r = tg.req
    live = np.zeros((tg.tiles, tg.end_event + 1), np.int64)
    if sz is None:
        sz = _span(r)
    np.add.at(live, (r["tile"], r["start"]), sz)
    np.add.at(live, (r["tile"], r["end"]), -sz)
    return np.cumsum(live, axis=1)


def live_peak(tg: TileGraph, sz: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Peak live request bytes per tile and its event (live_bytes)."""
    live = live_bytes(tg, sz)
    return live.max(1), live.argmax(1)


def support_bytes(tg: TileGraph, code=None, table=None) -> np.ndarray:
    """Per tile: what the footprint screen adds to the live bytes (code, exchange table,
    profile samples, 3 × 16 B); `code`, `table`: those bytes where already known."""
    code = isa.code_bytes(code_instructions(tg)) if code is None else code
    table = table_blob_bytes(tg) if table is None else table
    return code + table + profile_bytes(tg) + 3 * 16


def unit_waste(tg: TileGraph, t, region0_free: np.ndarray, prof_bytes: int) -> np.ndarray:
    """Per request: bytes beyond its extent that a bank-separated sequence (count > 1 with a
    bank edge: policy.ring_units' pooled `weights.ring` pieces) denies every request live
    beside it. It owns every unit its extent touches (an element pair in region 1, an
    element in region 0), so at least ceil(extent / unit) units; only a reservation may
    share them (region 1: the profile samples; region 0: code and exchange table), so the
    waste is the padding less those bytes, and a standard sequence's the lesser of the two
    regions'. analyse's unit screen adds it to the requests' exact extents (the footprint
    screen's alignment slack left out, so the screen rejects only what placement cannot
    place; `units_footprint`): without it the tiny 8-layer batch-4 trial with ring_units
    passed expand with six tiles 92-1,668 B over (a 90,112 B sequence = 2.75 of region 1's
    four pairs), and placement sent every such tile to CP-SAT (#26). The place phase
    proves the same rule independently (place/bound.py unit_waste). Resident weights'
    requests are such sequences too (default trials: up to 23,888 B a tile), so
    footprint_bytes, which reports and plots show, keeps the plain extents."""
    r = tg.req
    owns = np.zeros(len(r["size"]), bool)
    owns[tg.bank.ravel()] = True
    owns &= r["count"] > 1
    extent = r["stride"] * (r["count"] - 1) + r["size"]
    w1 = np.maximum(0, pad(extent, 2 * t.element_bytes) - extent - prof_bytes)
    w0 = np.maximum(0, pad(extent, t.element_bytes) - extent - (t.region0_bytes - region0_free[r["tile"]]))
    w = np.where(r["region"] == INTERLEAVED, w1, np.where(r["region"] == STANDARD, np.minimum(w0, w1), w0))
    return np.where(owns, w, 0)


def region1_peak(tg: TileGraph, t, region0_free: np.ndarray) -> np.ndarray:
    """Peak live bytes per tile that must sit in region 1: 128-bit operands (interleaved),
    and every other request whose extent exceeds its tile's free region 0
    (`region0_free`: region 0 less the code and exchange table placed there), since
    placement never lets a request straddle the region boundary (place/instance.py); a
    bank-separated sequence in whole element pairs (it owns every unit it touches).
    Without the second kind, two 80 KiB buffers live at once on a tiny tile (region 0
    holds 64 KiB, region 1 128 KiB) passed the screen and placement proved them
    infeasible: the 2560x1024x64 f16 GEMM's 8x2x4/2 grids (tests/test_serial_passes.py)."""
    r = tg.req
    sz = _span(r)
    unit = 2 * t.element_bytes
    owns = np.zeros(len(sz), bool)
    owns[tg.bank.ravel()] = True
    owns &= r["count"] > 1
    extent = r["stride"] * (r["count"] - 1) + r["size"]
    big = (r["region"] == STANDARD) & (extent > region0_free[r["tile"]])
    sz = np.where(owns, pad(sz, unit), sz) * ((r["region"] == INTERLEAVED) | big)
    return live_peak(tg, sz)[0]


def unencodable(tg: TileGraph) -> str | None:
    """Exchange rows and local copies move whole aligned 32-bit words."""
    x, w = tg.xfer, isa.COPY_WORD
    for f in ("soff", "doff", "s_row_bytes", "d_row_bytes", "s_stride", "d_stride"):
        bad = np.flatnonzero(x[f] % w)
        if len(bad):
            i = bad[0]
            return (f"transfer tile {x['src'][i]} -> tile {x['dst'][i]} in superstep {x['step'][i]}: "
                    f"{f}={x[f][i]} is not a whole {w}-byte word")
    return None


def profile_bytes(tg: TileGraph) -> int:
    """One sample per superstep executed (a Repeat body's once per iteration)."""
    return isa.PROFILE_SAMPLE_BYTES * int(tg.step_runs().sum())


def analyse(tg: TileGraph, t: Target) -> dict:
    cyc, per_tile = step_cycles(tg, t)
    code = isa.code_bytes(code_instructions(tg))
    table = table_blob_bytes(tg)
    support = support_bytes(tg, code, table)
    region1 = t.region1_bytes - profile_bytes(tg)
    region0_free = t.region0_bytes - code - table     # place.phase reserve_support
    peak, event = live_peak(tg)
    worst = int(np.argmax(peak + support))
    waste = unit_waste(tg, t, region0_free, profile_bytes(tg))
    units = None                                        # the unit screen, where some sequence wastes bytes:
    if waste.any():                                     # exact extents (no alignment slack) plus the waste,
        r = tg.req                                      # against the tile less its reservations
        upeak, uevent = live_peak(tg, r["stride"] * (r["count"] - 1) + r["size"] + waste)
        units = (upeak + code + table + profile_bytes(tg), uevent)
    nbytes = tg.xfer["s_row_bytes"] * tg.xfer["s_rows"]
    b0, b1 = tg.body_steps()
    return dict(cycles=int((cyc * tg.step_runs()).sum()), body_cycles=int(cyc[b0:b1].sum()), step_cycles=cyc,
                tile_cycles=per_tile,
                code_bytes=code, table_bytes=table, peak_bytes=peak, peak_event=event,
                footprint_bytes=peak + support, worst_tile=worst, units_footprint=units,
                region1_live_bytes=region1_peak(tg, t, region0_free), region1_bytes=region1,
                exchange_bytes=int(nbytes.sum()), unencodable=unencodable(tg))

"""lower: per-tile programs with operand addresses bound, encoded exchange tables,
host stream descriptors, linked into one Program (docs/architecture.md §3)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import isa
from ..target import Target
from ..expand import analysis
from ..expand.analysis import profile_bytes
from .program import Program


@dataclass
class LowerResult:
    program: Program | None = None
    rejection: object = None
    # host side, never given to the simulator: where each op's output lies once complete
    # (tile graph dump rows with `addr` for request + offset), and the 0-based [first, stop)
    # range of the program's supersteps that the Repeat body runs `count` times
    dump: dict = field(default_factory=dict)
    body: tuple = ()
    # host side too: the tile graph's transfer rows with the placement's addresses, the
    # independent statement of what each exchange moves (run's exchange check,
    # compiler/exchange_check.py), not the program's encoded tables
    moves: dict = field(default_factory=dict)
    # host side: the program runs the graph's softmax / p·v pairs deferred (policy.deferred_norm),
    # so run's read-back checks them against the deferred reference ops (compiler/deferred_norm.py)
    deferred_norm: bool = False
    pipeline_groups: int = 0    # the tile graph's spatial pipeline groups (run's Host streams items through them)

    def metrics(self) -> dict:
        p = self.program
        if p is None:
            return {}
        return {"code_max_bytes": int(np.diff(p.code_off).max()),
                "table_max_bytes": int(np.diff(p.table_off).max()),
                "instructions": int(p.code_off[-1] // isa.INSTR_BYTES)}


def _blob(tile: np.ndarray, words: np.ndarray, tiles: int):
    """Rows (already sorted by tile) -> flat uint8 blob and per-tile byte offsets."""
    per = np.bincount(tile, minlength=tiles) * words.shape[1] * 4
    off = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
    return np.ascontiguousarray(words.astype("<u4")).view(np.uint8).ravel(), off


def encode_tables(tg, addr: np.ndarray, table_addr: np.ndarray):
    """Per tile: send and receive entries sorted by (step, send-before-receive, peer,
    transfer), so matched pairs appear in the same order on both ends. Returns the
    entries blob and offsets, the EXCH segments per (tile, exchange step), and the
    relocation rows (tile, word address, stride) of the source-address word of every
    send from a sequence. With tg.bcast each multicast group (analysis.send_leaders) is
    one send entry (isa.MCAST) whose receiver list follows the tile's entries; sends are
    then ordered by their group's first transfer, a tile's receives from one sender too,
    so every pair's sends and receives keep one order."""
    x = tg.xfer
    n = len(x["src"])
    idx = np.arange(n)
    lead = analysis.send_leaders(tg)
    snd = np.flatnonzero(lead == idx)                     # rows whose send entry is written
    tile = np.concatenate([x["src"][snd], x["dst"]])
    step = np.concatenate([x["step"][snd], x["step"]])
    kind = np.repeat([0, 1], [len(snd), n])
    peer = np.concatenate([x["dst"][snd], x["src"]])
    reloc = np.concatenate([x["reloc"][snd], np.zeros(n, np.int64)])
    words = np.concatenate([
        np.stack([x["dst"], addr[x["sreq"]] + x["soff"], x["s_row_bytes"], x["s_rows"], x["s_stride"]], 1)[snd],
        np.stack([x["src"], addr[x["dreq"]] + x["doff"], x["d_row_bytes"], x["d_rows"], x["d_stride"]], 1)])
    if tg.bcast:
        rank = np.concatenate([snd, lead])
        order = np.lexsort((rank, np.where(kind == 0, 0, peer), kind, step, tile))
    else:
        order = np.lexsort((np.concatenate([idx, idx]), peer, kind, step, tile))
    T = tg.tiles
    mc, k = analysis.multicast_lists(tg)                  # leader rows (ascending), receiver counts
    ent_row = np.concatenate([snd, np.full(n, -1)])[order]
    tile, step, kind, words, reloc = tile[order], step[order], kind[order], words[order], reloc[order]
    ex_blob, ex_off = _blob(tile, words, T)
    pos = np.arange(len(tile)) - ex_off[tile] // isa.ENTRY_BYTES          # entry index within its tile
    r = reloc != 0
    rl = np.stack([tile[r], table_addr[tile[r]] + pos[r] * isa.ENTRY_BYTES + 4, reloc[r]], 1)
    # EXCH segments: first entry of each (tile, step) and its send/receive counts
    key = tile * (len(tg.steps) + 2) + step
    seg, first, cnt = np.unique(key, return_index=True, return_counts=True)
    nsend = np.add.reduceat(kind == 0, first) if len(first) else np.zeros(0, np.int64)
    seg_tile = tile[first]
    seg_addr = table_addr[seg_tile] + pos[first] * isa.ENTRY_BYTES
    if len(mc):
        ex_blob, ex_off = _lists(tg, x, lead, mc, k, ent_row, tile, key, seg, seg_addr, table_addr,
                                 ex_blob, ex_off, words)
    return ex_blob, ex_off, dict(tile=seg_tile, step=step[first], addr=seg_addr, nsend=nsend, nrecv=cnt - nsend), rl


def _lists(tg, x, lead, mc, k, ent_row, tile, key, seg, seg_addr, table_addr, ex_blob, ex_off, words):
    """Multicast receiver lists (isa.MCAST) after each tile's entries, in its entries'
    order, and their entries' peer words pointing at them (offset from the EXCH's table
    address). Returns the blob and offsets with the lists."""
    T = tg.tiles
    at = np.flatnonzero(np.isin(ent_row, mc))             # the multicast entries, blob order
    row = ent_row[at]
    kk = k[np.searchsorted(mc, row)]
    size = isa.mcast_list_bytes(kk)
    t = tile[at]
    start = np.searchsorted(t, np.arange(T))
    csum = np.cumsum(size) - size
    rel = csum - csum[np.minimum(start[t], len(csum) - 1)]            # within the tile's lists
    list_addr = table_addr[t] + np.diff(ex_off)[t] + rel
    exch_addr = seg_addr[np.searchsorted(seg, key[at])]
    w = words.astype(np.int64)
    w[at, 0] = isa.MCAST | (list_addr - exch_addr)
    ent_blob, _ = _blob(tile, w, T)
    # list words: k, then the receivers in transfer order
    members = np.argsort(lead, kind="stable")             # rows grouped by leader, xfer order
    lw = np.zeros(int(size.sum()) // 4, np.int64)
    wpos = csum // 4
    lw[wpos] = kk
    grp_start = np.searchsorted(lead[members], row)
    j = np.arange(int(kk.sum())) - np.repeat(np.cumsum(kk) - kk, kk)
    lw[np.repeat(wpos + 1, kk) + j] = x["dst"][members[np.repeat(grp_start, kk) + j]]
    l_blob = lw.astype("<u4").view(np.uint8)
    l_off = np.concatenate([[0], np.cumsum(np.bincount(t, size, T))]).astype(np.int64)
    blob = np.concatenate([part for q in range(T) for part in
                           (ent_blob[ex_off[q]:ex_off[q + 1]], l_blob[l_off[q]:l_off[q + 1]])])
    return blob, ex_off + l_off


def scale_rows(tg, table_addr: np.ndarray, ex_off, nreloc: np.ndarray):
    """Per-iteration scales: each tile's scale tables (analysis.scale_tables order,
    after its relocation entries) as f32 rows of `count`, their address per kernel
    row (0 where the scale is an immediate), and their blob."""
    tile, sseq = analysis.scale_tables(tg)
    row_bytes = tg.count * isa.SCALE_BYTES
    first = np.searchsorted(tile, np.arange(tg.tiles))
    at = (table_addr[tile] + np.diff(ex_off)[tile] + nreloc[tile] * isa.RELOC_BYTES
          + (np.arange(len(tile)) - first[tile]) * row_bytes)
    k = tg.kern
    pair = k["tile"] * (len(tg.scale_seqs) + 1) + k["sseq"]
    idx = np.searchsorted(tile * (len(tg.scale_seqs) + 1) + sseq, pair)
    addr = np.where(k["sseq"] != 0, at[np.minimum(idx, max(len(at) - 1, 0))] if len(at) else 0, 0)
    words = tg.scale_seqs[sseq - 1].astype(np.float32).view(np.uint32) if len(tile) else np.zeros((0, tg.count))
    return addr, _blob(tile, words, tg.tiles)


def seg_rows(tg, addr: np.ndarray, base: np.ndarray):
    """MATMULs with b in segments (isa.F_SEG_B, tilegraph bseg): each tile's segment
    tables (nseg, then addr and len per segment; F_SEG_2D: addr, r0, c0, rows, cols), in kernel order, from `base` (per
    tile: where they start in its table blob). Returns each kernel row's table address
    (0 elsewhere), the tables' blob and offsets, and the relocation rows (tile, word
    address, stride) of the addr words of segments read in place from a sequence."""
    b, k, T = tg.bseg, tg.kern, tg.tiles
    at = np.zeros(len(k["tile"]), np.int64)
    kern, first, nseg = np.unique(b["kern"], return_index=True, return_counts=True)
    if not len(kern):
        return at, (np.zeros(0, np.uint8), np.zeros(T + 1, np.int64)), np.zeros((0, 3), np.int64)
    tile = k["tile"][kern]
    order = np.lexsort((kern, tile))                      # per tile, kernel order
    kern, first, nseg, tile = kern[order], first[order], nseg[order], tile[order]
    wps = np.where(b["rows"][first] > 0, isa.SEG2_WORDS, isa.SEG_WORDS)    # words a segment (F_SEG_2D: 5)
    size = isa.seg_table_bytes(nseg, wps)
    csum = np.cumsum(size) - size
    start = np.searchsorted(tile, np.arange(T))           # each tile's first table
    pos = csum - csum[np.minimum(start[tile], len(csum) - 1)]
    at[kern] = base[tile] + pos
    rows = np.repeat(np.arange(len(kern)), nseg)
    j = np.arange(len(rows)) - np.repeat(np.cumsum(nseg) - nseg, nseg)
    seg = np.repeat(first, nseg) + j                      # bseg rows, in each kernel's column order
    words = np.zeros(int(size.sum()) // 4, np.int64)
    wpos = np.cumsum(size // 4) - size // 4
    words[wpos] = nseg
    w = wpos[rows] + 1 + j * wps[rows]
    words[w] = addr[b["req"][seg]] + b["off"][seg]
    rect = wps[rows] == isa.SEG2_WORDS
    words[w + 1] = np.where(rect, b["row"][seg], b["len"][seg])
    wr = w[rect]
    words[wr + 2], words[wr + 3], words[wr + 4] = b["col"][seg][rect], b["rows"][seg][rect], b["len"][seg][rect]
    blob = words.astype("<u4").view(np.uint8)
    off = np.concatenate([[0], np.cumsum(np.bincount(tile, size, T))]).astype(np.int64)
    r = b["reloc"][seg] != 0
    rl = np.stack([tile[rows][r], (at[kern][rows] + 4 + j * 4 * wps[rows])[r], b["reloc"][seg][r]], 1)
    return at, (blob, off), rl


def link_tables(T: int, ex_blob, ex_off, rl: np.ndarray, scales=None, segs=None, rl_outer=None):
    """Each tile's table blob: its exchange entries, then its relocation entries
    (rows tile, word address, stride; any order, sorted here by tile), the outer
    REPEAT's after them, then its scale tables (scale_rows' blob), then its b segment
    tables (seg_rows' blob)."""
    if rl_outer is not None:                            # each tile's inner entries, then its outer ones
        rl = np.concatenate([rl, rl_outer])
    loop = np.arange(len(rl)) >= len(rl) - (0 if rl_outer is None else len(rl_outer))
    rl = rl[np.lexsort((loop, rl[:, 0]))]
    rl_blob, rl_off = _blob(rl[:, 0], rl[:, 1:], T)
    none = (np.zeros(0, np.uint8), np.zeros(T + 1, np.int64))
    sc_blob, sc_off = scales if scales is not None else none
    sg_blob, sg_off = segs if segs is not None else none
    ex_len, rl_len, sc_len, sg_len = np.diff(ex_off), np.diff(rl_off), np.diff(sc_off), np.diff(sg_off)
    blob = np.concatenate([part for t in range(T) for part in
                           (ex_blob[ex_off[t]:ex_off[t + 1]], rl_blob[rl_off[t]:rl_off[t + 1]],
                            sc_blob[sc_off[t]:sc_off[t + 1]], sg_blob[sg_off[t]:sg_off[t + 1]])]) \
        if T else np.zeros(0, np.uint8)
    return blob, np.concatenate([[0], np.cumsum(ex_len + rl_len + sc_len + sg_len)]).astype(np.int64)


# Instruction words 1..7 of each kernel, from the tile graph's kernel columns:
# "aN" = address of operand N (request rN placed + oN), "iN" = immediate, "scale" = f32 bits.
WORDS = {
    isa.MATMUL: ("a0", "a1", "a2", "i0", "i1", "i2", "scale"),
    isa.ADD: ("a0", "a1", "a2", "i0", "i1", "i2"),
    isa.COPY: ("a0", "a1", "i0", "i1", "i2", "i3"),
    isa.GELU: ("a0", "a1", "i0"),
    isa.LAYERNORM: ("a0", "a1", "a2", "a3", "i0", "i1", "i2"),
    isa.SOFTMAX: ("a0", "a1", "i0", "i1", "i2", "i3", "a2"),     # a2: F_SM_DEFER's sums
    isa.CAST: ("a0", "a1", "i0", "scale"),
    isa.ONLINE_SOFTMAX: ("a0", "a1", "a2", "i0", "i1", "i2"),
    isa.ROWSCALE: ("a0", "a1", "a2", "a3", "i0", "i1"),
    isa.BIAS: ("a0", "a1", "a2", "i0", "i1"),
    isa.MERGE: ("a0", "a1", "a2", "i0", "i1", "i2"),
}


def kernel_words(k: dict, scale: np.ndarray, addr: np.ndarray, scale_addr=None, seg_addr=None) -> np.ndarray:
    """scale_addr: per kernel, its per-iteration scale's table address (0: immediate);
    seg_addr: per kernel, its b segment table's address (a MATMUL flagged F_SEG_B)."""
    n = len(k["tile"])
    w = np.zeros((n, isa.INSTR_WORDS), np.int64)
    table = k["sseq"] != 0 if "sseq" in k else np.zeros(n, bool)
    w[:, 0] = k["op"] | (k["dtype"] << 8) | np.where(table, isa.F_SCALE_TABLE << 24, 0)
    src = {f"a{x}": np.where(k[f"r{x}"] >= 0, addr[np.maximum(k[f"r{x}"], 0)] + k[f"o{x}"], 0) for x in range(4)}
    src |= {f"i{x}": k[f"i{x}"] for x in range(4)}
    src["scale"] = np.float32(scale).view(np.uint32).astype(np.int64) if n else np.zeros(0, np.int64)
    if table.any():
        src["scale"] = np.where(table, scale_addr, src["scale"])
    if seg_addr is not None:
        src["a1"] = np.where((k["op"] == isa.MATMUL) & (((k["dtype"] >> 16) & isa.F_SEG_B) != 0), seg_addr, src["a1"])
    for op, words in WORDS.items():
        sel = k["op"] == op
        for col, name in enumerate(words, start=1):
            w[sel, col] = src[name][sel]
    return w


def encode_code(tg, addr: np.ndarray, seg: dict, relocs: dict, code_addr: np.ndarray, scale_addr=None,
                seg_addr=None, outer=None):
    """Per tile: the outer REPEAT (tg.outer > 1) opening the first superstep, REPEAT
    (with a Repeat) opening the body's, then per superstep its kernels or HOSTs, EXCH
    segments and SYNC; END. Also the relocation rows (tile, word address, stride) of the
    operand-1 word of every kernel that reads a sequence in place, then of the scale
    word of every kernel with per-iteration scales (stride one f32); and the outer
    REPEAT's: the delta word of every HOST moving a stream item."""
    k = tg.kern
    nk = len(k["tile"])
    kw = kernel_words(k, tg.scale, addr, scale_addr, seg_addr)
    S, T = len(tg.steps), tg.tiles
    ns = len(seg["tile"])
    ew = np.zeros((ns, isa.INSTR_WORDS), np.int64)
    ew[:, 0], ew[:, 1], ew[:, 2], ew[:, 3] = isa.EXCH, seg["addr"], seg["nsend"], seg["nrecv"]
    sync_tile, sync_step = np.repeat(np.arange(T), S), np.tile(np.arange(1, S + 1), T)
    sw = np.zeros((T * S, isa.INSTR_WORDS), np.int64)
    sw[:, 0] = isa.SYNC
    endw = np.zeros((T, isa.INSTR_WORDS), np.int64)
    endw[:, 0] = isa.END
    b0, b1 = tg.body_steps()                # the body: supersteps b0+1 .. b1 (1-based)
    in_body = lambda st: (st > b0) & (st <= b1)
    nbody = np.bincount(np.concatenate([k["tile"][in_body(k["step"])], seg["tile"][in_body(seg["step"])],
                                        sync_tile[in_body(sync_step)]]), minlength=T)
    rep = T if tg.count > 1 else 0          # REPEAT count, body, reloc, nreloc opens the body's first superstep
    rw = np.zeros((rep, isa.INSTR_WORDS), np.int64)
    if rep:
        rw[:, 0], rw[:, 1], rw[:, 2], rw[:, 3], rw[:, 4] = isa.REPEAT, tg.count, nbody, relocs["addr"], relocs["n"]
    h = tg.hstep
    hw = np.zeros((len(h["tile"]), isa.INSTR_WORDS), np.int64)      # HOST dir, first, rows, delta 0
    hw[:, 0], hw[:, 1], hw[:, 2], hw[:, 3] = isa.HOST, h["dir"], h["first"], h["rows"]
    nh = len(hw)
    out = T if tg.outer > 1 else 0          # the outer REPEAT: every instruction but END
    ow = np.zeros((out, isa.INSTR_WORDS), np.int64)
    if out:
        total = np.bincount(np.concatenate([k["tile"], seg["tile"], sync_tile, h["tile"]]), minlength=T) + (rep > 0)
        ow[:, 0], ow[:, 1], ow[:, 2], ow[:, 3], ow[:, 4] = isa.REPEAT, tg.outer, total, outer["addr"], outer["n"]
    tile = np.concatenate([k["tile"], seg["tile"], sync_tile, np.arange(T), np.arange(rep), h["tile"], np.arange(out)])
    step = np.concatenate([k["step"], seg["step"], sync_step, np.full(T, S + 1), np.full(rep, b0 + 1), h["step"],
                           np.ones(out, np.int64)])
    rank = np.concatenate([np.zeros(nk), np.ones(ns), np.full(T * S, 2), np.full(T, 3), np.full(rep, -1),
                           np.zeros(nh), np.full(out, -2)])
    seq = np.arange(len(tile))
    order = np.lexsort((seq, rank, step, tile))
    blob, off = _blob(tile[order], np.concatenate([kw, ew, sw, endw, rw, hw, ow])[order], T)
    pc = np.empty(len(order), np.int64)                 # instruction index within its tile
    pc[order] = np.arange(len(order)) - off[tile[order]] // isa.INSTR_BYTES
    hpc = pc[nk + ns + T * S + T + rep:][:nh]
    r = h["reloc"] != 0
    ro = np.stack([h["tile"][r], code_addr[h["tile"][r]] + hpc[r] * isa.INSTR_BYTES + 16, h["reloc"][r]], 1)
    r = np.flatnonzero(k["reloc"] != 0)
    a1 = {op: 1 + words.index("a1") for op, words in WORDS.items() if "a1" in words}
    word = np.array([a1[o] for o in k["op"][r]], np.int64)
    rl = np.stack([k["tile"][r], code_addr[k["tile"][r]] + pc[r] * isa.INSTR_BYTES + 4 * word, k["reloc"][r]], 1)
    r = np.flatnonzero(k["sseq"] != 0)
    b0, b1 = tg.body_steps()
    if len(r) and (tg.count < 2 or ((k["step"][r] <= b0) | (k["step"][r] > b1)).any()):
        raise AssertionError("lower: a kernel with per-iteration scales outside the Repeat body")
    sw = {op: 1 + words.index("scale") for op, words in WORDS.items() if "scale" in words}
    word = np.array([sw[o] for o in k["op"][r]], np.int64)
    rs = np.stack([k["tile"][r], code_addr[k["tile"][r]] + pc[r] * isa.INSTR_BYTES + 4 * word,
                   np.full(len(r), isa.SCALE_BYTES)], 1)
    return blob, off, np.concatenate([rl, rs]), ro


def host_rows(h: dict, req_tile: np.ndarray, addr: np.ndarray) -> dict:
    return dict(stream=h["stream"], host_off=h["host_off"], tile=req_tile[h["req"]],
                addr=addr[h["req"]] + h["off"], row_bytes=h["row_bytes"], rows=h["rows"],
                host_stride=h["host_stride"], tile_stride=h["tile_stride"])


def lower(place_res, sched, t: Target, exchange_table_cap: int) -> LowerResult:
    if sched.rejection:
        return LowerResult(rejection=sched.rejection)
    tg, pl = place_res.tilegraph, place_res.placement
    ex_blob, ex_off, seg, rl_x = encode_tables(tg, pl.addr, pl.support.table_addr)
    # the relocation table follows the exchange entries; its size is known before the code
    relocs = dict(addr=pl.support.table_addr + np.diff(ex_off), n=analysis.reloc_entries(tg))
    outer = dict(addr=relocs["addr"] + relocs["n"] * isa.RELOC_BYTES, n=analysis.outer_reloc_entries(tg))
    # and the scale tables follow the relocation entries, the b segment tables those
    nrel = relocs["n"] + outer["n"]
    scale_addr, scales = scale_rows(tg, pl.support.table_addr, ex_off, nrel)
    seg_base = pl.support.table_addr + np.diff(ex_off) + nrel * isa.RELOC_BYTES + np.diff(scales[1])
    seg_addr, segs, rl_s = seg_rows(tg, pl.addr, seg_base)
    code, code_off, rl_k, rl_o = encode_code(tg, pl.addr, seg, relocs, pl.support.code_addr, scale_addr, seg_addr,
                                             outer)
    table, table_off = link_tables(tg.tiles, ex_blob, ex_off, np.concatenate([rl_x, rl_k, rl_s]), scales, segs,
                                   rl_o)
    reserved = tg.analysis["code_bytes"]
    if not np.array_equal(np.diff(code_off), reserved) or \
            not np.array_equal(np.diff(table_off), tg.analysis["table_bytes"]):
        raise AssertionError("lower: encoded sizes differ from the reservations made in expand")
    prog = Program(
        target={f: getattr(t, f) for f in t.__dataclass_fields__}, exchange_table_cap=exchange_table_cap,
        code=code, code_off=code_off, code_addr=pl.support.code_addr,
        table=table, table_off=table_off, table_addr=pl.support.table_addr,
        profile_addr=pl.support.profile_addr, profile_bytes=profile_bytes(tg),
        in_streams=tg.in_streams, out_streams=tg.out_streams, in_panels=dict(tg.in_panels),
        host_in=host_rows(tg.hin, tg.req["tile"], pl.addr),
        host_out=host_rows(tg.hout, tg.req["tile"], pl.addr),
        step_in=host_rows(tg.sin, tg.req["tile"], pl.addr), step_out=host_rows(tg.sout, tg.req["tile"], pl.addr))
    d = getattr(tg, "dump", None) or {}
    dump = {k: v for k, v in d.items() if k not in ("req", "off")}
    if d:
        dump["addr"] = pl.addr[d["req"]] + d["off"]
    return LowerResult(prog, dump=dump, body=tuple(int(b) for b in tg.body_steps()), moves=moves(tg, pl.addr),
                       deferred_norm=tg.deferred, pipeline_groups=tg.groups)


def moves(tg, addr: np.ndarray) -> dict:
    """LowerResult.moves: every xfer row (step, tiles, row shapes, reloc) with absolute
    addresses for request + offset; `name` indexes `names` (the destination buffer's)."""
    x = tg.xfer
    if not len(x["step"]):
        return {}
    keep = ("step", "src", "dst", "s_row_bytes", "s_rows", "s_stride", "d_row_bytes", "d_rows", "d_stride", "reloc")
    return {**{f: x[f] for f in keep}, "saddr": addr[x["sreq"]] + x["soff"], "daddr": addr[x["dreq"]] + x["doff"],
            "name": tg.req["name"][x["dreq"]], "names": list(tg.names)}

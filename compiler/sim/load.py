"""Loading a Program into tile memory and the host stream phases.

Loading writes each tile's code and exchange table at their placed addresses
and zeroes the profile-sample areas; the machine refuses blobs it could not
hold (code outside region 0, tables over the policy cap, anything out of range).
Host descriptors are symbolic strided rows, moved as chunks (memory.plan_chunks).
Streams named in Program.in_panels are first rearranged on the host into AMP
micro-panel order (isa.panel_order); descriptors address the rearranged bytes.
"""
from __future__ import annotations


import numpy as np

from .. import isa
from ..lower.program import Program
from .fault import MachineFault, first_fault
from .memory import I64, Memory, extent, move, plan_chunks, scatter


def _hex(x) -> str:
    return hex(int(x))


def _blob_parts(blob, off, tiles: int, what: str):
    blob = np.asarray(blob, np.uint8).reshape(-1)
    off = np.asarray(off, I64)
    if len(off) != tiles + 1 or off[0] != 0 or off[-1] != len(blob) or np.any(np.diff(off) < 0):
        raise ValueError(f"malformed Program: {what}_off must be {tiles + 1} non-decreasing offsets "
                         f"from 0 to len({what}) = {len(blob)}")
    return blob, off[:-1], np.diff(off)


def load(m: Memory, p: Program) -> None:
    T = m.tiles
    for name in ("code_addr", "table_addr", "profile_addr"):
        if len(getattr(p, name)) != T:
            raise ValueError(f"malformed Program: {name} has {len(getattr(p, name))} entries, "
                             f"the target has {T} tiles")
    tiles = np.arange(T)
    code, c_off, c_len = _blob_parts(p.code, p.code_off, T, "code")
    table, t_off, t_len = _blob_parts(p.table, p.table_off, T, "table")
    c_addr = np.asarray(p.code_addr, I64)
    t_addr = np.asarray(p.table_addr, I64)
    pr_addr = np.asarray(p.profile_addr, I64)
    ph = "load"

    # Code may only be fetched from region 0, so the machine refuses to load it elsewhere.
    bad = (c_addr < m.base) | (c_addr + c_len > m.r0)
    first_fault(bad, lambda i: f"code [{_hex(c_addr[i])}, {_hex(c_addr[i] + c_len[i])}) is not entirely "
                               f"inside region 0 [{_hex(m.base)}, {_hex(m.r0)})", tiles, phase=ph)
    first_fault(c_len % isa.INSTR_BYTES != 0,
                lambda i: f"code of {c_len[i]} B is not whole {isa.INSTR_BYTES}-byte instructions",
                tiles, phase=ph)
    first_fault(t_len > p.exchange_table_cap,
                lambda i: f"exchange table of {t_len[i]} B exceeds the cap of {p.exchange_table_cap} B",
                tiles, phase=ph)
    first_fault((t_len > 0) & ~m.in_range(t_addr, t_len),
                lambda i: f"exchange table [{_hex(t_addr[i])}, {_hex(t_addr[i] + t_len[i])}) is out of range "
                          f"[{_hex(m.base)}, {_hex(m.end)})", tiles, phase=ph)
    pb = int(p.profile_bytes)
    first_fault(pr_addr % isa.PROFILE_SAMPLE_BYTES != 0,
                lambda i: f"profile area at {_hex(pr_addr[i])} is not {isa.PROFILE_SAMPLE_BYTES}-byte aligned",
                tiles, phase=ph)
    first_fault((pb > 0) & ~m.in_range(pr_addr, pb),
                lambda i: f"profile area [{_hex(pr_addr[i])}, {_hex(pr_addr[i] + pb)}) is out of range "
                          f"[{_hex(m.base)}, {_hex(m.end)})", tiles, phase=ph)

    ones = np.ones(T, I64)
    for blob, off, ln, addr in ((code, c_off, c_len, c_addr), (table, t_off, t_len, t_addr)):
        sp, dp, L = plan_chunks(off, ln, ones, ln, m.pos(tiles, addr), ln, ones, ln)
        move(blob, m.flat, sp, dp, L)
    if pb > 0:
        scatter(m.flat, m.pos(tiles, pr_addr), np.zeros((T, pb), np.uint8))


def _host_checks(m: Memory, h: dict, lens: np.ndarray, phase: str, stream_word: str):
    """Checks common to host in and out: stream index, host range, tile range."""
    n = len(h["tile"])
    idx = np.arange(n)
    s, tile = h["stream"], h["tile"]
    rb, rows = h["row_bytes"], h["rows"]
    tiles_ok = (tile >= 0) & (tile < m.tiles)
    first_fault((s < 0) | (s >= len(lens)),
                lambda i: f"descriptor {i} names {stream_word} stream {s[i]} (there are {len(lens)})",
                phase=phase)
    first_fault(~tiles_ok, lambda i: f"descriptor {i} names tile {tile[i]} (the machine has {m.tiles})",
                phase=phase)
    first_fault((rb < 0) | (rows < 0) | (h["host_stride"] < 0) | (h["tile_stride"] < 0)
                | (rb > m.tile_bytes) | (h["tile_stride"] > m.tile_bytes)
                | (rows > 2**31) | (h["host_stride"] > 2**31),   # keeps extents inside int64
                lambda i: f"descriptor {i} has a negative or oversized field", tile, phase=phase)
    host_ext = extent(rb, rows, h["host_stride"])
    slen = lens[s]
    first_fault((h["host_off"] < 0) | (h["host_off"] + host_ext > slen),
                lambda i: f"descriptor {i} reaches past the end of its {stream_word} stream "
                          f"({h['host_off'][i]} + {host_ext[i]} > {slen[i]} B)", tile, phase=phase)
    tile_ext = extent(rb, rows, h["tile_stride"])
    first_fault((rows * rb > 0) & ~m.in_range(h["addr"], tile_ext),
                lambda i: f"descriptor {i}: [{_hex(h['addr'][i])}, {_hex(h['addr'][i] + tile_ext[i])}) is "
                          f"out of range [{_hex(m.base)}, {_hex(m.end)})", tile, phase=phase)
    return idx


def _as_host(h: dict) -> dict:
    return {k: np.asarray(v, I64).reshape(-1) for k, v in h.items()}


def _panel_check(buf: np.ndarray, name: str, rows, cols, ebytes, P) -> None:
    rows, cols, ebytes, P = (int(x) for x in (rows, cols, ebytes, P))
    if min(rows, cols, ebytes, P) <= 0:
        raise ValueError(f"in_panels[{name!r}] = {(rows, cols, ebytes, P)} must be positive (rows, cols, ebytes, P)")
    mat = rows * cols * ebytes
    if len(buf) % mat:
        raise ValueError(f"input stream {name!r} of {len(buf)} B is not whole [{rows}, {cols}] matrices "
                         f"of {ebytes}-byte elements ({mat} B each) for its panel order")


def _panel_stream(buf: np.ndarray, name: str, rows, cols, ebytes, P, out: np.ndarray | None = None) -> np.ndarray:
    """The host's rearrangement of a panel stream: its consecutive [rows, cols]
    matrices of `ebytes`-byte elements, each sent in isa.panel_order(., P) (the
    layout the AMP engine loads b in), so no tile spends cycles reordering weights.
    Same length: host_in offsets then address the rearranged bytes. Written in one
    strided copy per part (full panels, the last partial one) into `out` (uint8, at least
    len(buf) bytes: host_in reuses one for every stream, since fresh pages cost a fault
    each) or a new array; equal to isa.panel_order's bytes (tests/sim/test_panels.py)."""
    _panel_check(buf, name, rows, cols, ebytes, P)
    rows, cols, ebytes, P = (int(x) for x in (rows, cols, ebytes, P))
    if len(buf) == 0:
        return buf
    # elements as opaque ebytes-wide values, so the copy moves whole elements (as unsigned
    # integers where there is one that wide: numpy copies those 3x faster than void records)
    elem = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(ebytes, np.dtype((np.void, ebytes)))
    x = buf.view(elem).reshape(-1, rows, cols)
    M, full = len(x), rows - rows % P
    out = (np.empty(len(buf), np.uint8) if out is None else out)[:len(buf)]
    o = out.view(elem).reshape(M, rows * cols)
    if full:      # panel p: rows [pP, pP + P) as [cols, P]
        np.copyto(np.reshape(o[:, :full * cols], (M, full // P, cols, P), copy=False),   # views: never a copy
                  x[:, :full].reshape(M, full // P, P, cols).swapaxes(-1, -2))
    if rows % P:  # the last panel: rows [full, rows) as [cols, rows - full]
        np.copyto(np.reshape(o[:, full * cols:], (M, cols, rows - full), copy=False), x[:, full:].swapaxes(-1, -2))
    return out


def host_in(m: Memory, p: Program, streams: dict) -> int:
    """Copy the host streams into tile memory; returns the bytes moved. Every stream is
    checked before any byte moves, then each is taken from `streams` again when it is
    copied: the host holds one stream at a time (`streams` may read them from a file only
    when asked: at 27 layers the weights are ~390 MB, beside ~920 MB of tile memory)."""
    def stream(name):
        a = np.asarray(streams[name])
        if a.dtype != np.uint8 or a.ndim != 1:
            raise ValueError(f"input stream {name!r} must be a 1-D uint8 array of raw bytes, "
                             f"got {a.dtype} with shape {a.shape}")
        return np.ascontiguousarray(a)

    sizes = []
    for name in p.in_streams:
        if name not in streams:
            raise ValueError(f"missing input stream {name!r} (program needs {list(p.in_streams)})")
        sizes.append(len(stream(name)))
    for name, spec in p.in_panels.items():
        if name not in p.in_streams:
            raise ValueError(f"in_panels names {name!r}, which is not an input stream "
                             f"(program streams {list(p.in_streams)})")
        _panel_check(np.empty(sizes[p.in_streams.index(name)], np.uint8), name, *spec)
    h = _as_host(p.host_in)
    if len(h["tile"]) == 0:
        return 0
    _host_checks(m, h, np.array(sizes, I64), "host in", "input")
    rb, rows = h["row_bytes"], h["rows"]
    panels = [sizes[p.in_streams.index(n)] for n in p.in_panels]
    scratch = np.empty(max(panels), np.uint8) if panels else None    # every panel stream's rearrangement
    for si in np.unique(h["stream"]):
        k = h["stream"] == si
        sp, dp, L = plan_chunks(h["host_off"][k], rb[k], rows[k], h["host_stride"][k],
                                m.pos(h["tile"][k], h["addr"][k]), rb[k], rows[k], h["tile_stride"][k])
        name = p.in_streams[si]
        # panel streams rearranged one at a time into one buffer: the host holds one
        # rearranged copy at most (the weights of 27 layers are ~400 MB of them)
        buf = stream(name)
        src = _panel_stream(buf, name, *p.in_panels[name], out=scratch) if name in p.in_panels else buf
        del buf
        move(src, m.flat, sp, dp, L, split=(m.tiles // 2) * m.tile_bytes)   # chunks stay in their tile
        del src
    return int((rb * rows).sum())


def host_step(m: Memory, p: Program, streams: dict, outs: list, ins: tuple, step: int) -> tuple[int, int]:
    """The HOST instructions of one superstep: ins = (tile, pc, dir, first, rows, delta)
    arrays, one per instruction. Moves the stepped descriptors they name (rows
    [first, first + rows) of step_in or step_out at host_off + delta) and returns the
    bytes moved in and out. Checked like host in / out, and every row must name the
    executing tile."""
    tile, pc, d, first, nrows, delta = ins
    moved = [0, 0]
    for dr, table, names in ((0, p.step_in, p.in_streams), (1, p.step_out, list(p.out_streams))):
        k = np.flatnonzero(d == dr)
        if not len(k):
            continue
        h = _as_host(table)
        n = len(h["tile"])
        first_fault((first[k] < 0) | (nrows[k] < 0) | (first[k] + nrows[k] > n),
                    lambda i: f"HOST names stepped rows [{first[k][i]}, {first[k][i] + nrows[k][i]}) of "
                              f"{n} (dir {dr})", tile[k], step, pc[k])
        who = np.repeat(k, nrows[k])
        row = np.arange(len(who)) - np.repeat(np.cumsum(nrows[k]) - nrows[k] - first[k], nrows[k])
        first_fault(h["tile"][row] != tile[who],
                    lambda i: f"HOST moves stepped row {row[i]}, which names tile {h['tile'][row[i]]}",
                    tile[who], step, pc[who])
        r = {f: v[row] for f, v in h.items()}
        r["host_off"] = r["host_off"] + np.where(delta[who] >= 2**31, delta[who] - 2**32, delta[who])
        bufs = [np.asarray(streams[nm]) for nm in p.in_streams] if dr == 0 else outs
        _host_checks(m, r, np.array([len(b) for b in bufs], I64), f"HOST step {step}",
                     "input" if dr == 0 else "output")
        rb, rows = r["row_bytes"], r["rows"]
        for si in np.unique(r["stream"]):
            j = r["stream"] == si
            if dr == 0 and names[si] in p.in_panels:
                raise MachineFault(f"HOST streams {names[si]!r}, a panel stream (sent whole, before the run)",
                                   step=step)
            host = (r["host_off"][j], rb[j], rows[j], r["host_stride"][j])
            tiles = (m.pos(r["tile"][j], r["addr"][j]), rb[j], rows[j], r["tile_stride"][j])
            if dr == 0:
                move(np.ascontiguousarray(bufs[si], np.uint8), m.flat, *plan_chunks(*host, *tiles))
            else:
                move(m.flat, bufs[si], *plan_chunks(*tiles, *host))
        moved[dr] += int((rb * rows).sum())
    return moved[0], moved[1]


def host_out(m: Memory, p: Program, outs: list) -> tuple[dict, int]:
    """Copy tile memory into the output streams (`outs`, out_buffers(p), which HOST
    steps may have written into already); returns (outputs, bytes moved)."""
    names = list(p.out_streams)
    h = _as_host(p.host_out)
    if len(h["tile"]) == 0:
        return dict(zip(names, outs)), 0
    _host_checks(m, h, np.array([len(o) for o in outs], I64), "host out", "output")
    rb, rows = h["row_bytes"], h["rows"]
    for si in np.unique(h["stream"]):
        k = h["stream"] == si
        sp, dp, L = plan_chunks(m.pos(h["tile"][k], h["addr"][k]), rb[k], rows[k], h["tile_stride"][k],
                                h["host_off"][k], rb[k], rows[k], h["host_stride"][k])
        move(m.flat, outs[si], sp, dp, L)
    return dict(zip(names, outs)), int((rb * rows).sum())


def out_buffers(p: Program) -> list:
    return [np.zeros(int(p.out_streams[n]), np.uint8) for n in p.out_streams]


def host_cycles(target, nbytes_in: int, nbytes_out: int) -> int:
    return target.host_cycles(nbytes_in, nbytes_out)

"""FlashAttention: per head, the tiles form a grid of query blocks × key splits. Each
tile walks its split's keys block by block (one exchange and one compute superstep
per key block) keeping a running max, sum and output: S = Q·K_bᵀ (MATMUL, transposed
b), P = ONLINE_SOFTMAX(S), O = O·c + P·V_b (ROWSCALE). With one split, O = O / l;
with several, the splits' partials of each query block are merged: by one MERGE kernel
(flash_merge.py, `policy.flash_merge`) or by the older kernels' composition (flash_combine).
Splitting the keys cuts what a tile receives (its query rows plus only its split's
keys) and what a home tile sends (each key row goes to one tile per query block).
Padding keys are never gathered, so no mask is needed; S is never stored beyond one
block. The grid is chosen by a cost estimate (choose_grid).

With a batch (`batch` B, issue #27) the unit is an (image, head) group g = b·H + h:
image b's tokens are rows [b·T, (b+1)·T) of Q, K, V and O, and head h of Q, K, V sits
at columns `cols`[i] + h·d (one QKV tensor read through three column windows), of O at
h·d; each group gets its own query blocks × key splits, as a head does alone."""
from __future__ import annotations

import numpy as np

from .. import isa
from ..plan.homes import starts
from ..target import STANDARD
from . import flash_combine, flash_merge
from .layout import Layout, gather, pad

F16 = isa.DTYPES["f16"]


def even_starts(n: int, parts: int) -> np.ndarray:
    """Even partition starts rounded down to even rows (f16 pairs stay whole words)."""
    s = starts(n, parts)
    return np.unique(s - s % 2)


def lengths(st: np.ndarray, n: int) -> np.ndarray:
    return np.diff(np.append(st, n))


def expand_flash(c, op):
    T, H, d = op.attr("tokens"), op.attr("heads"), op.attr("head_dim")
    valid, kb, scale = op.attr("valid"), op.attr("block"), op.attr("scale")
    B, cols = op.attr("batch", 1), np.asarray(op.attr("cols", (0, 0, 0)), np.int64)
    G = B * H
    nq, ns = choose_grid(c.t, c.policy, T, G, valid, d, kb, B)
    qs, ks = even_starts(T, nq), even_starts(valid, ns)
    ql, kl = lengths(qs, T), lengths(ks, valid)
    nq, ns = len(qs), len(ks)
    g, q, s = (x.ravel() for x in np.meshgrid(np.arange(G), np.arange(nq), np.arange(ns), indexing="ij"))
    tile = (g * nq + q) * ns + s
    name = op.outputs[0]
    Q, K, V = (c.lay[n] for n in op.inputs)
    qb, o, state = _walk(c, name, Q, K, V, tile, (g // H) * T, cols[:, None] + (g % H) * d,
                         qs[q], ql[q], ks[s], kl[s], d, kb, scale)
    if ns == 1:
        st = c.compute_step()
        c.kernel(step=st, tile=tile, op=isa.ROWSCALE, dtype=F16 | isa.F_RECIP << 16, r0=o[tile], r1=o[tile],
                 r2=state[tile], o2=4 * ql[q], i0=ql[q], i1=d)
        c.bld.reads(state[tile], st)
        blocks = (g % H, (g // H) * T + qs[q], tile, o[tile])
    else:
        gq = np.arange(G * nq)                                   # (group, query block) pairs
        if c.policy.flash_merge:                                 # one MERGE (flash_merge.py)
            blk, ss, _, ct, out = flash_merge.combine(c, name, gq * ns, ql[gq % nq], state, o, d, ns)
        else:
            xp = flash_combine.tail(c, name, c.compute_step(), tile, ql[q], qb, state)
            blk, ss, _, ct, out = flash_combine.combine(c, name, gq * ns, ql[gq % nq], xp, state, o, d, ns)
        grp = blk // nq
        blocks = (grp % H, (grp // H) * T + qs[blk % nq] + ss, ct, out[ct])
    c.lay[name] = _layout(B * T, H, d, *blocks)


def _layout(T, H, d, h, row0, tile, req) -> Layout:
    """Output block (rows [row0, next row0) of the T rows, head h) on `tile` in request `req`."""
    rs = np.unique(row0)
    nb = len(rs)
    lay = Layout(T, H * d, rs, np.arange(H) * d, np.zeros((nb, H), np.int64), np.zeros((nb, H), np.int64), 2)
    r = np.searchsorted(rs, row0)
    lay.tile[r, h], lay.req[r, h] = tile, req
    return lay


def _walk(c, name, Q, K, V, tile, r0, col, q0, rows, k0, klen, d, kb, scale):
    """The online-softmax walk of every tile over its keys [k0, k0 + klen) of its image
    (rows from r0); col[i]: its head's first column in Q, K, V (i = 0, 1, 2). Every
    split walks the same number of blocks (the last ones may be shorter)."""
    bld = c.bld
    nb = int(-(-klen.max() // kb))
    bs = -(-klen // nb)
    x = c.exchange_step()
    qb = bld.alloc(f"{name}.q", tile, pad(rows * d * 2, 8), 8, STANDARD, x)
    gather(bld, Q, x, r0 + q0, r0 + q0 + rows, col[0], col[0] + d, tile, qb[tile], 0, d * 2)
    o = bld.alloc(name, tile, pad(rows * d * 2, 8), 8, STANDARD, x)
    state = bld.alloc(f"{name}.state", tile, 12 * rows, 8, STANDARD, x)
    for b in range(nb):
        kn = np.clip(klen - b * bs, 0, bs)
        a = kn > 0
        if b:
            x = c.exchange_step()
        _block(c, name, K, V, x, b == 0, tile[a], col[1:, a], rows[a], r0[a] + k0[a] + b * bs[a], kn[a], d,
               scale, qb, o, state)
    return qb, o, state


def _block(c, name, K, V, x, first, tile, col, rows, k0, kn, d, scale, qb, o, state):
    bld = c.bld
    # K_b and V_b are MATMUL b operands: interleaved memory, banks apart from the a operands
    voff = pad(kn * d * 2, 16)
    kv = bld.alloc(f"{name}.kv", tile, 2 * voff, *isa.OPERANDS[isa.MATMUL]["b"], x)
    for lay, off, c0 in ((K, 0, col[0]), (V, voff, col[1])):
        gather(bld, lay, x, k0, k0 + kn, c0, c0 + d, tile, kv[tile], off, d * 2)
    s = c.compute_step()
    p_off = pad(rows * kn * 2, 8)
    sb = bld.alloc(f"{name}.s", tile, 2 * p_off, 8, STANDARD, s)
    bld.bank.append(np.stack([qb[tile], kv[tile]], 1))
    bld.bank.append(np.stack([sb[tile], kv[tile]], 1))
    pv = bld.alloc(f"{name}.pv", tile, pad(rows * d * 2, 8), 8, STANDARD, s)
    c.kernel(step=s, tile=tile, op=isa.MATMUL, dtype=F16 | isa.F_TRANSPOSE_B << 16, r0=qb[tile],
             r1=kv[tile], r2=sb[tile], i0=rows, i1=d, i2=kn, scale=scale)
    c.kernel(step=s, tile=tile, op=isa.ONLINE_SOFTMAX, dtype=F16 | (isa.F_FIRST << 16 if first else 0),
             r0=sb[tile], o0=p_off, r1=sb[tile], r2=state[tile], i0=rows, i1=kn, i2=isa.f32_bits(1.0))
    # the first block's P·V is the running output itself
    c.kernel(step=s, tile=tile, op=isa.MATMUL, dtype=F16, r0=sb[tile], o0=p_off, r1=kv[tile],
             o1=voff, r2=(o if first else pv)[tile], i0=rows, i1=kn, i2=d, scale=1.0)
    if not first:      # O = O·c + P·V  (c = exp(m_old - m_new), row 2 of the state)
        c.kernel(step=s, tile=tile, op=isa.ROWSCALE, dtype=F16 | isa.F_ADD << 16, r0=o[tile], r1=o[tile],
                 r2=state[tile], o2=8 * rows, r3=pv[tile], i0=rows, i1=d)
    for r in (qb, kv, sb, pv, o, state):
        bld.reads(r[tile], s)


def choose_grid(t, policy, T: int, H: int, valid: int, d: int, kb: int, B: int = 1) -> tuple[int, int]:
    """(query blocks, key splits) per (image, head) group (H: the B·heads groups) of
    least estimated cycles among the grids that fit the tiles, the exchange-table cap
    and half a tile's memory."""
    per_head = max(1, t.tiles // H)
    best = None
    for nq in range(1, min(per_head, T // 2) + 1):
        for ns in range(1, min(per_head // nq, max(1, valid // 2)) + 1):
            est = estimate(t, policy, T, H, valid, d, kb, nq, ns, B)
            if est is not None and (best is None or est < best[0]):
                best = (est, nq, ns)
    return (best[1], best[2]) if best else (1, 1)


def estimate(t, policy, T, H, valid, d, kb, nq, ns, B=1) -> int | None:
    """Cycles of the largest tile's walk (exchange: its query rows and keys received,
    home tiles sending each key row to one tile per query block per head; compute:
    the block kernels) plus the merge; None when the grid does not fit. H: the
    (image, head) groups; B: images (their B·T key rows spread over the home tiles)."""
    R, kn_max = int(lengths(even_starts(T, nq), T).max()), int(lengths(even_starts(valid, ns), valid).max())
    nq, ns = len(even_starts(T, nq)), len(even_starts(valid, ns))
    nb = -(-kn_max // kb)
    kn = -(-kn_max // nb)
    home_rows = -(-B * T // t.tiles)                      # rows of K (or V) per home tile
    # table entries: query and key rows received, each held key row sent to heads·nq tiles
    entries = R + 2 * kn_max + 2 * nb + 4 * (H // B) * nq * home_rows + 2 * H + (8 * ns if ns > 1 else 0) + 64
    mem = 2 * R * d * 3 + 4 * kn * d + 4 * R * kn + 12 * R + (2 * R * (d + 12) + 32 * R if ns > 1 else 0)
    if entries * isa.ENTRY_BYTES > policy.exchange_table_cap or mem > t.tile_bytes // 2:
        return None
    bw = t.exchange_bytes_per_cycle
    senders = min(t.tiles, 2 * B * -(-ns * kn // home_rows))  # home tiles holding one step's K and V rows
    send = H * nq * ns * 2 * kn * d * 2 // max(1, senders)
    recv = 2 * kn * d * 2
    exch = nb * (t.exchange_phase_cycles + t.sync_cycles) + (max(send, recv) * nb + R * d * 2) // bw
    mm = lambda m, k, n: t.matmul_cycles(m, k, n, "f16")
    comp = nb * (mm(R, d, kn) + mm(R, kn, d) + t.online_softmax_cycles(R, kn) + t.sync_cycles)
    comp += (nb - 1) * t.rowscale_cycles(R, d, 1, 0)
    if ns == 1:
        return int(exch + comp + t.rowscale_cycles(R, d, 0, 1) + t.sync_cycles)
    merge = flash_merge.cost if policy.flash_merge else flash_combine.cost
    return int(exch + comp + merge(t, R, ns, d))

"""FlashAttention: per head, query blocks spread over the tiles; every tile walks the
keys block by block (one exchange and one compute superstep per key block) keeping a
running max, sum and output: S = Q·K_bᵀ (MATMUL, transposed b), P = ONLINE_SOFTMAX(S),
O = O·c + P·V_b (ROWSCALE), finally O = O / l. Padding keys are never gathered, so
no mask is needed; S is never stored beyond one block."""
from __future__ import annotations

import numpy as np

from .. import isa
from ..target import STANDARD
from .layout import Layout, gather, pad, starts

F16 = isa.DTYPES["f16"]


def expand_flash(c, op):
    bld, t = c.bld, c.t
    Q, K, V = (c.lay[n] for n in op.inputs)
    T, H, d = op.attr("tokens"), op.attr("heads"), op.attr("head_dim")
    valid, kb, scale = op.attr("valid"), op.attr("block"), op.attr("scale")
    # query blocks per head: all tiles, unless the exchange table would pass the cap. A
    # q tile receives ~2·valid key/value rows (one entry each); a home row tile sends its
    # K (or V) row to every q tile of every head (H·nq entries per row it holds, 2 at most).
    room = c.policy.exchange_table_cap // isa.ENTRY_BYTES - 2 * valid - 64
    nq = max(1, min(t.tiles // H, room // (4 * H)))
    qs = starts(T, nq)
    qs = qs - qs % 2                                   # even query blocks keep f16 rows word-aligned
    qs = np.unique(qs)
    ql = np.diff(np.append(qs, T))
    h, q = (x.ravel() for x in np.meshgrid(np.arange(H), np.arange(len(qs)), indexing="ij"))
    tile = h * len(qs) + q
    rows = ql[q]
    pad8, pad16 = (lambda x: pad(x, 8)), (lambda x: pad(x, 16))
    x = c.exchange_step()
    qb = bld.alloc(f"{op.outputs[0]}.q", tile, pad8(rows * d * 2), 8, STANDARD, x)
    gather(bld, Q, x, qs[q], qs[q] + rows, h * d, h * d + d, tile, qb[tile], 0, d * 2)
    o = bld.alloc(op.outputs[0], tile, pad8(rows * d * 2), 8, STANDARD, x)
    state = bld.alloc(f"{op.outputs[0]}.state", tile, 12 * rows, 8, STANDARD, x)
    for b, k0 in enumerate(range(0, valid, kb)):
        kn = min(kb, valid - k0)
        if b:
            x = c.exchange_step()
        # K_b and V_b are MATMUL b operands: interleaved memory, banks apart from the a operands
        kv = bld.alloc(f"{op.outputs[0]}.kv", tile, 2 * pad16(kn * d * 2), *isa.OPERANDS[isa.MATMUL]["b"], x)
        for lay, off in ((K, 0), (V, pad16(kn * d * 2))):
            gather(bld, lay, x, k0, k0 + kn, h * d, h * d + d, tile, kv[tile], off, d * 2)
        s = c.compute_step()
        sb = bld.alloc(f"{op.outputs[0]}.s", tile, 2 * pad8(rows * kn * 2), 8, STANDARD, s)
        bld.bank.append(np.stack([qb[tile], kv[tile]], 1))
        bld.bank.append(np.stack([sb[tile], kv[tile]], 1))
        pv = bld.alloc(f"{op.outputs[0]}.pv", tile, pad8(rows * d * 2), 8, STANDARD, s)
        p_off = pad8(rows * kn * 2)
        c.kernel(step=s, tile=tile, op=isa.MATMUL, dtype=F16 | isa.F_TRANSPOSE_B << 16, r0=qb[tile],
                 r1=kv[tile], r2=sb[tile], i0=rows, i1=d, i2=kn, scale=scale)
        c.kernel(step=s, tile=tile, op=isa.ONLINE_SOFTMAX, dtype=F16 | (isa.F_FIRST << 16 if b == 0 else 0),
                 r0=sb[tile], o0=p_off, r1=sb[tile], r2=state[tile], i0=rows, i1=kn, i2=isa.f32_bits(1.0))
        first = b == 0     # the first block's P·V is the running output itself
        c.kernel(step=s, tile=tile, op=isa.MATMUL, dtype=F16, r0=sb[tile], o0=p_off, r1=kv[tile],
                 o1=pad16(kn * d * 2), r2=(o if first else pv)[tile], i0=rows, i1=kn, i2=d, scale=1.0)
        if not first:      # O = O·c + P·V  (c = exp(m_old - m_new), row 2 of the state)
            c.kernel(step=s, tile=tile, op=isa.ROWSCALE, dtype=F16 | isa.F_ADD << 16, r0=o[tile], r1=o[tile],
                     r2=state[tile], o2=8 * rows, r3=pv[tile], i0=rows, i1=d)
        for r in (qb, kv, sb, pv, o, state):
            bld.reads(r[tile], s)
    s = c.compute_step()
    c.kernel(step=s, tile=tile, op=isa.ROWSCALE, dtype=F16 | isa.F_RECIP << 16, r0=o[tile], r1=o[tile],
             r2=state[tile], o2=4 * rows, r3=-1, i0=rows, i1=d)
    bld.reads(state[tile], s)
    lay = Layout(T, H * d, qs, np.arange(H) * d, np.zeros((len(qs), H), np.int64),
                 np.zeros((len(qs), H), np.int64), 2)
    lay.tile[q, h], lay.req[q, h] = tile, o[tile]
    c.lay[op.outputs[0]] = lay

"""LayerNorm over row halves on two tiles (policy.ln_halves): the lowering of the layout
plan/lnhalves.py prices. expand/graph.py calls it for the LayerNorms a candidate names."""
from __future__ import annotations

import numpy as np

from .. import isa
from ..plan.lnhalves import STATS_BYTES, halves_grid
from ..plan.matmul import OUT_BYTES
from ..target import STANDARD
from .layout import blocks, convert, like, pad

F16 = isa.DTYPES["f16"]


def _partner(A, B):
    """Block (a, b)'s partner (a, 1 - b) as a block index (blocks row-major, two columns)."""
    return A * 2 + (1 - B)


def expand_ln_halves(c, op):
    """LayerNorm over row halves on two tiles (policy.ln_halves, plan/lnhalves.py): x
    converted to the halves grid with each block's gamma and beta columns gathered in the
    same exchange; each tile's F_LN_STATS writes its rows' f32 (mean, M2) into its slot of
    a [2, rows, 2] buffer (left half slot 0), one exchange superstep sends the slot to the
    partner's buffer, and each tile's F_LN_HALF normalises its half from both."""
    x, C = c.lay[op.inputs[0]], c.lay[op.inputs[0]].cols
    h = C // 2
    rs, grid = halves_grid(x.rows, c.t.tiles)
    xs = c.exchange_step()
    x = convert(c.bld, x, f"{op.outputs[0]}.halves", rs, np.array([0, h]), grid, xs, 8, STANDARD)
    A, B, r, k = blocks(x)
    tiles, gbo = x.tile[A, B], pad(h * 2, 8)
    gb = c.bld.alloc_rows(f"{op.outputs[0]}.gamma_beta", tiles, 2 * gbo, 8, STANDARD, xs)
    first = len(c.bld.xfer)
    for n, pname in enumerate(op.inputs[1:3]):
        c.gather_vector(pname, xs, tiles, gb, n * gbo, x.cstart[B], x.cstart[B] + k)
    c.may_move(op.inputs[1], first, gb, xs)
    s1 = c.compute_step()
    slot = STATS_BYTES * r
    st = c.bld.alloc_rows(f"{op.outputs[0]}.stats", tiles, 2 * slot, 8, STANDARD, s1)
    c.kernel(step=s1, tile=tiles, op=isa.LAYERNORM, dtype=F16 | isa.F_LN_STATS << 16, r0=st, o0=B * slot,
             r1=x.req[A, B], o1=x.off[A, B], i0=r, i1=k)
    c.bld.reads(x, s1)
    s2 = c.exchange_step()
    peer = _partner(A, B)
    c.bld.add("xfer", step=s2, src=tiles, dst=tiles[peer], sreq=st, soff=B * slot, dreq=st[peer],
              doff=B * slot, s_row_bytes=slot, s_rows=1, s_stride=slot, d_row_bytes=slot, d_rows=1,
              d_stride=slot, reloc=0)
    c.bld.reads(st, s2)
    s3 = c.compute_step()
    out = like(c.bld, op.outputs[0], x, s3, OUT_BYTES)
    c.kernel(step=s3, tile=tiles, op=isa.LAYERNORM, dtype=F16 | isa.F_LN_HALF << 16, r0=out.req[A, B],
             r1=x.req[A, B], o1=x.off[A, B], r2=gb, o2=0, r3=st, o3=0, i0=r, i1=k,
             i2=isa.f32_bits(op.attr("eps", 1e-6)))
    for used in (x, gb, st):
        c.bld.reads(used, s3)
    c.lay[op.outputs[0]] = out

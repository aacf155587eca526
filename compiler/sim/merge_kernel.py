"""MERGE: split-key (flash) attention's merge of the partial states of one query block's
key splits (isa.py documents the words). A mixin of kernels.Kernels, beside the vector
kernels: f16 data, f32 arithmetic (fmath.py), the same loads, stores and operand checks.

    parts  f16[splits, rows, cols]   split j's unnormalised output O_j
    stats  f32[2, splits, rows]      split j's running max m_j, then its running sum l_j
    out    f16[rows, cols]           sum_j c_j O_j * (1 / sum_j c_j l_j),  c_j = exp(m_j - max_j m_j)

Sums run over the splits in order 0, 1, ... (f32, no FMA: numpy's element-wise loops),
so the bytes depend only on the operands. Before this kernel the merge was ~20
ONLINE_SOFTMAX / ROWSCALE / ADD calls on tiny rows (expand/flash_combine.py); its cost,
as the PopLibs vertices a Poplar program would run for it, is compiler/costs/merge.py
(and, independently, compiler/sim/oracle.py)."""
from __future__ import annotations

import numpy as np

from .. import isa
from . import fmath
from .operands import groups


class MergeKernel:
    def merge(self, step, tiles, pcs, w):
        out, parts, stats, R, C, S = (w[:, j] for j in range(1, 7))
        self._dims(isa.MERGE, step, tiles, pcs, {"rows": R, "cols": C, "splits": S})
        self.check_operands(isa.MERGE, step, tiles, pcs,
                            {"out": (out, 2 * R * C, None), "parts": (parts, 2 * S * R * C, None),
                             "stats": (stats, 8 * S * R, None)})
        f32 = np.float32
        for grp in groups(np.stack([R, C, S], 1)):
            r, c, s = int(R[grp[0]]), int(C[grp[0]]), int(S[grp[0]])

            def body(g):
                tg = tiles[g]
                o = self._load(tg, parts[g], 2 * s * r * c).reshape(-1, s, r, c)
                st = self._load(tg, stats[g], 8 * s * r, "f32").reshape(-1, 2, s, r)
                m, l = st[:, 0], st[:, 1]
                cj = fmath.exp(m - m.max(1, keepdims=True))          # [n, s, r]
                L = np.zeros((len(g), r), f32)
                acc = np.zeros((len(g), r, c), f32)
                for j in range(s):                                   # fixed order: split 0, 1, ...
                    L = L + l[:, j] * cj[:, j]
                    acc = acc + o[:, j] * cj[:, j, :, None]
                self._store16(tg, out[g], acc * (f32(1) / L)[:, :, None])
            self.each(self.slices(grp, 4 * (s + 1) * r * c + 16 * s * r), body)
        return self.t.merge_cycles(R, C, S)

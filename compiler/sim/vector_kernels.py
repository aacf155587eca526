"""The vector kernels, f16 data with f32 arithmetic (fmath.py): GELU, BIAS, LAYERNORM,
SOFTMAX, CAST, ONLINE_SOFTMAX, ROWSCALE. A mixin of kernels.Kernels, which gives it the worker
slices, operand checks, loads and stores; MATMUL, ADD and COPY are matmul_kernels.py."""
from __future__ import annotations

import numpy as np

from .. import isa
from . import decode, fmath
from .memory import I64, gather
from .fault import first_fault
from .operands import groups, to_f16, widen
from .scales import scale_word


class VectorKernels:
    # ---- vector kernels (f16 data, f32 arithmetic: fmath) ----------------------------
    def gelu(self, step, tiles, pcs, w):
        _, _, _, fl = decode.fields(w[:, 0])
        out, src, ne = w[:, 1], w[:, 2], w[:, 3]
        self._dims(isa.GELU, step, tiles, pcs, {"nelem": ne})
        self.check_operands(isa.GELU, step, tiles, pcs, {"out": (out, 2 * ne, None), "src": (src, 2 * ne, None)})
        erf_form = (fl & isa.F_ERF) != 0
        for grp in groups(np.stack([erf_form, ne], 1)):
            n = int(ne[grp[0]])
            def body(g):
                tg = tiles[g]
                self._store16(tg, out[g], fmath.gelu(self._load(tg, src[g], 2 * n), bool(erf_form[grp[0]])))
            self.each(self.slices(grp, 16 * n), body)
        return self.t.gelu_cycles(ne)

    def bias(self, step, tiles, pcs, w):
        out, src, bias, R, C = (w[:, j] for j in range(1, 6))
        self._dims(isa.BIAS, step, tiles, pcs, {"rows": R, "cols": C})
        self.check_operands(isa.BIAS, step, tiles, pcs, {"out": (out, 2 * R * C, None), "src": (src, 2 * R * C, None),
                                                         "bias": (bias, 2 * C, None)})
        for grp in groups(np.stack([R, C], 1)):
            r, c = int(R[grp[0]]), int(C[grp[0]])
            def body(g):
                tg = tiles[g]
                x = self._load(tg, src[g], 2 * r * c).reshape(-1, r, c)
                b = self._load(tg, bias[g], 2 * c).reshape(-1, 1, c)
                self._store16(tg, out[g], x + b)
            self.each(self.slices(grp, 16 * r * c), body)
        return self.t.bias_cycles(R, C)

    def layernorm(self, step, tiles, pcs, w):
        out, src, gamma, beta, R, C = (w[:, j] for j in range(1, 7))
        eps = w[:, 7].astype(np.uint32).view(np.float32)
        fl = decode.fields(w[:, 0])[3]
        self._dims(isa.LAYERNORM, step, tiles, pcs, {"rows": R, "cols": C})
        first_fault(fl == isa.F_LN_STATS | isa.F_LN_HALF,
                    lambda i: "LAYERNORM with both F_LN_STATS and F_LN_HALF", tiles, step, pcs)
        stats, half = fl == isa.F_LN_STATS, fl == isa.F_LN_HALF
        nb = 2 * R * C
        gb = 2 * C + np.where(half, (-(2 * C)) % 8 + 2 * C, 0)      # F_LN_HALF: gamma then beta, 8-aligned
        self.check_operands(isa.LAYERNORM, step, tiles, pcs,
                            {"out": (out, np.where(stats, 8 * R, nb), None), "src": (src, nb, None),
                             "gamma": (gamma, gb, ~stats), "beta": (beta, np.where(half, 16 * R, 2 * C), ~stats)})
        for grp in groups(np.stack([R, C, fl], 1)):
            r, c, f = int(R[grp[0]]), int(C[grp[0]]), int(fl[grp[0]])
            def body(g):
                tg = tiles[g]
                x = self._load(tg, src[g], 2 * r * c).reshape(-1, r, c)
                if f == isa.F_LN_STATS:
                    self._store(tg, out[g], fmath.layernorm_stats(x).astype("<f4").view(np.uint8))
                    return
                gm = self._load(tg, gamma[g], 2 * c).reshape(-1, 1, c)
                if f == isa.F_LN_HALF:
                    bt = self._load(tg, gamma[g] + 2 * c + (-(2 * c)) % 8, 2 * c).reshape(-1, 1, c)
                    st = self._load(tg, beta[g], 16 * r, "f32").reshape(-1, 2, r, 2)
                    y = fmath.layernorm_half(x, gm, bt, st[:, 0], st[:, 1], eps[g][:, None, None])
                else:
                    bt = self._load(tg, beta[g], 2 * c).reshape(-1, 1, c)
                    y = fmath.layernorm(x, gm, bt, eps[g][:, None, None])
                self._store16(tg, out[g], y)
            self.each(self.slices(grp, 16 * r * c), body)
        return self.t.layernorm_cycles(R, C, fl)

    def softmax(self, step, tiles, pcs, w):
        out, src, R, C = (w[:, j] for j in range(1, 5))
        scale = w[:, 5].astype(np.uint32).view(np.float32)
        defer = (decode.fields(w[:, 0])[3] & isa.F_SM_DEFER) != 0     # policy.deferred_norm: word 7 = sums
        sums = w[:, 7]
        self._dims(isa.SOFTMAX, step, tiles, pcs, {"rows": R, "cols": C})
        valid = np.where(w[:, 6] == 0, C, w[:, 6])          # 0 = every column
        first_fault(valid > C, lambda i: f"SOFTMAX valid = {w[i, 6]} exceeds cols = {C[i]}", tiles, step, pcs)
        nb = 2 * R * C
        self.check_operands(isa.SOFTMAX, step, tiles, pcs, {"out": (out, nb, None), "src": (src, nb, None),
                                                            "sums": (sums, 4 * R, defer)})
        for grp in groups(np.stack([R, C, valid, defer], 1)):
            r, c, v, d = int(R[grp[0]]), int(C[grp[0]]), int(valid[grp[0]]), bool(defer[grp[0]])
            def body(g):
                tg = tiles[g]
                x = self._load(tg, src[g], 2 * r * c).reshape(-1, r, c)
                y = np.zeros(x.shape, np.float32)
                if d:                # exp(s - max) rounded to f16, and the f32 sum of those f16 values
                    p = to_f16(fmath.unnormalised_softmax(np.ascontiguousarray(x[:, :, :v]),
                                                          scale[g][:, None, None]))
                    y[:, :, :v] = widen(p.view(np.uint8), "f16").reshape(-1, r, v)
                    self._store(tg, sums[g], y.sum(-1, dtype=np.float32).astype("<f4").view(np.uint8))
                elif v == c:         # every column: no zero padding to write
                    y = fmath.softmax(x, scale[g][:, None, None])
                else:
                    y[:, :, :v] = fmath.softmax(np.ascontiguousarray(x[:, :, :v]), scale[g][:, None, None])
                self._store16(tg, out[g], y)
            self.each(self.slices(grp, 16 * r * c + 4 * r), body)
        return self.t.softmax_cycles(R, C, scale != np.float32(1.0), defer)

    def cast(self, step, tiles, pcs, w):
        _, dt, dt2, fl = decode.fields(w[:, 0])
        first_fault(dt == dt2, lambda i: f"CAST from {decode.dtype_name(dt2[i])} to itself "
                                         f"(f16 -> fp8 or fp8 -> f16 only)", tiles, step, pcs)
        out, src, ne = w[:, 1], w[:, 2], w[:, 3]
        scale = scale_word(self, step, tiles, pcs, w[:, 4], fl, isa.CAST)
        self._dims(isa.CAST, step, tiles, pcs, {"nelem": ne})
        to8 = dt == isa.DTYPES["fp8"]                     # f16 -> fp8 (else fp8 -> f16)
        sb, db = np.where(to8, 2, 1), np.where(to8, 1, 2)
        self.check_operands(isa.CAST, step, tiles, pcs, {"out": (out, ne * db, None), "src": (src, ne * sb, None)})
        for grp in groups(np.stack([to8, ne], 1)):
            n, down = int(ne[grp[0]]), bool(to8[grp[0]])
            def body(g):
                tg, sc = tiles[g], scale[g][:, None]
                if down:
                    y = fmath.to_fp8(self._load(tg, src[g], 2 * n) / sc)
                else:
                    y = to_f16(self._load(tg, src[g], n, "fp8") * sc)
                self._store(tg, out[g], y.view(np.uint8))
            self.each(self.slices(grp, 12 * n), body)
        return self.t.cast_cycles(ne, sb, db)

    def online_softmax(self, step, tiles, pcs, w):
        _, _, _, fl = decode.fields(w[:, 0])
        out, src, state, R, C = (w[:, j] for j in range(1, 6))
        scale = w[:, 6].astype(np.uint32).view(np.float32)
        self._dims(isa.ONLINE_SOFTMAX, step, tiles, pcs, {"rows": R, "cols": C})
        nb = 2 * R * C
        self.check_operands(isa.ONLINE_SOFTMAX, step, tiles, pcs,
                            {"out": (out, nb, None), "src": (src, nb, None), "state": (state, 12 * R, None)})
        first = (fl & isa.F_FIRST) != 0
        f32 = np.float32
        for grp in groups(np.stack([first, R, C], 1)):
            r, c = int(R[grp[0]]), int(C[grp[0]])
            def body(g):
                tg = tiles[g]
                s = self._load(tg, src[g], 2 * r * c).reshape(-1, r, c) * scale[g][:, None, None]
                if first[grp[0]]:
                    m = np.full((len(g), r), -np.inf, f32)
                    l = np.zeros((len(g), r), f32)
                else:
                    st = gather(self.m.flat, self.m.pos(tg, state[g]), 12 * r).view("<f4").reshape(-1, 3, r)
                    m, l = st[:, 0], st[:, 1]
                m2 = np.maximum(m, s.max(-1))
                ms = fmath.safe_max(m2)
                c_ = np.zeros_like(m2) if first[grp[0]] else fmath.exp(m - ms)
                p = to_f16(fmath.exp(s - ms[:, :, None]))
                l2 = l * c_ + widen(p.view(np.uint8), "f16").reshape(-1, r, c).sum(-1)
                self._store(tg, out[g], p)
                self._store(tg, state[g], np.stack([m2, l2, c_], 1).astype("<f4"))
            self.each(self.slices(grp, 16 * r * c + 24 * r), body)
        return self.t.online_softmax_cycles(R, C)

    def rowscale(self, step, tiles, pcs, w):
        _, _, _, fl = decode.fields(w[:, 0])
        out, s0, vec, s1, R, C = (w[:, j] for j in range(1, 7))
        self._dims(isa.ROWSCALE, step, tiles, pcs, {"rows": R, "cols": C})
        add, recip = (fl & isa.F_ADD) != 0, (fl & isa.F_RECIP) != 0
        nb = 2 * R * C
        self.check_operands(isa.ROWSCALE, step, tiles, pcs,
                            {"out": (out, nb, None), "src0": (s0, nb, None), "vec": (vec, 4 * R, None),
                             "src1": (s1, nb, add)})
        cycles = np.zeros(len(tiles), I64)
        for grp in groups(np.stack([fl, R, C], 1)):
            r, c = int(R[grp[0]]), int(C[grp[0]])
            cycles[grp] = self.t.rowscale_cycles(r, c, bool(add[grp[0]]), bool(recip[grp[0]]))
            def body(g):
                tg = tiles[g]
                v = self._load(tg, vec[g], 4 * r, "f32").reshape(-1, r, 1)
                if recip[grp[0]]:
                    v = np.float32(1) / v
                y = self._load(tg, s0[g], 2 * r * c).reshape(-1, r, c) * v
                if add[grp[0]]:
                    y += self._load(tg, s1[g], 2 * r * c).reshape(-1, r, c)
                self._store16(tg, out[g], y)
            self.each(self.slices(grp, 16 * r * c + 8 * r), body)
        return cycles

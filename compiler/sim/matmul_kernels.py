"""MATMUL, ADD and COPY, the simulator's kernels that are not vector arithmetic: the AMP's
products (f16/fp8/f32, mixed f16/fp8, transposed or micro-panel b; each output the exact sum
of its products rounded once to f32, exact.matmul_f32), the sum of f16 partials in f32 (a
k-split's reduction, the residual add), and word-aligned byte moves. A mixin of
kernels.Kernels, which gives it the worker slices, operand checks, loads and stores; the
vector kernels are vector_kernels.py."""
from __future__ import annotations

import numpy as np

from .. import exact, isa
from ..target import DTYPE_BYTES
from . import decode, jit
from .fault import first_fault
from .memory import I64, extent, gather, move_within, plan_chunks
from .operands import _WIDEN, NP_DTYPES, groups, scratch, widen
from .scales import scale_word
from .segments import read_rects, read_segments


class MatmulKernels:
    # ---- MATMUL ---------------------------------------------------------------
    def matmul(self, step, tiles, pcs, w):
        _, dt, dt2, fl = decode.fields(w[:, 0])
        dta = np.where(dt2 == 0, dt, dt2)                   # a's dtype (0: same as b's)
        f32c = isa.DTYPES["f32"]
        first_fault((dt == f32c) != (dta == f32c),
                    lambda i: f"MATMUL mixes f32 with {decode.dtype_name(dt[i] if dt[i] != f32c else dta[i])} "
                              f"(f32 only with f32)", tiles, step, pcs)
        a, b, out, M, K, N = (w[:, j] for j in range(1, 7))
        self._dims(isa.MATMUL, step, tiles, pcs, {"m": M, "k": K, "n": N})
        sizes = np.array([0] + [DTYPE_BYTES[isa.DTYPE_NAMES[c]] for c in (1, 2, 3)], I64)
        seg = (fl & isa.F_SEG_B) != 0              # b in segments: each checked as a b of its own
        f32o = (fl & isa.F_F32_OUT) != 0           # out f32: a k-split's partial (policy.f32_partials)
        self.check_operands(isa.MATMUL, step, tiles, pcs,
                            {"a": (a, M * K * sizes[dta], None), "b": (b, K * N * sizes[dt], ~seg),
                             "out": (out, M * N * np.where(f32o, 4, 2), None)})
        scale = scale_word(self, step, tiles, pcs, w[:, 7], fl, isa.MATMUL)
        tr = (fl & isa.F_TRANSPOSE_B) != 0
        pan = (fl & isa.F_PANEL_B) != 0
        sig, segs = np.zeros(len(tiles), I64), None
        if seg.any():
            sig, segs = self._segments(step, tiles, pcs, a, M * K * sizes[dta], K, N, sizes[dt], w[:, 2], seg, fl,
                                       dt, dta)
        # The AMP engine loads a b dtype the target lists in amp_panel_elems only as
        # micro-panels (isa.panel_order): such b must be flagged F_PANEL_B, and no other
        # b layout (row-major, transposed) or dtype has a panel mode to fall back on.
        panel_h = self.panel_h
        listed = panel_h[dt] > 0
        ff = lambda bad, msg: first_fault(bad, msg, tiles, step, pcs)
        ff(pan & tr, lambda i: "MATMUL b cannot be both micro-panel (F_PANEL_B) and transposed (F_TRANSPOSE_B)")
        ff(((fl & isa.F_SEG_K) != 0) & ~seg, lambda i: "MATMUL flag F_SEG_K without F_SEG_B (rows of which segments?)")
        ff(((fl & isa.F_SEG_2D) != 0) & ~seg, lambda i: "MATMUL flag F_SEG_2D without F_SEG_B")
        ff(pan & ~listed,
           lambda i: f"MATMUL b of {decode.dtype_name(dt[i])} has no micro-panel mode on this target")
        ff(listed & ~pan,
           lambda i: f"MATMUL b of {decode.dtype_name(dt[i])} is read only as micro-panels of "
                     f"{panel_h[dt[i]]} on this target: F_PANEL_B is required")
        cycles = np.zeros(len(tiles), I64)
        for grp in groups(np.stack([dt, dta, tr, pan, M, K, N, sig, f32o], 1)):
            g0 = grp[0]
            db, da = isa.DTYPE_NAMES[int(dt[g0])], isa.DTYPE_NAMES[int(dta[g0])]
            mm, kk, nn = int(M[g0]), int(K[g0]), int(N[g0])
            # the panel layout and segments cost nothing extra (segments are whole
            # output-channel groups, one weight pointer each: compiler/costs/amp.py)
            f32_out = bool(f32o[g0])
            cycles[grp] = self.t.matmul_cycles(mm, kk, nn, db, da, f32_out)
            P = int(panel_h[dt[g0]]) if pan[g0] else 0
            def body(g):
                bs = b[g] if not sig[g0] else (int(segs[3][g0]), [(segs[0][g, s], tuple(map(int, segs[1][g0, s])))
                                                                  for s in range(segs[2][g0])])
                self._matmul(tiles[g], a[g], bs, out[g], scale[g], mm, kk, nn, da, db, bool(tr[g0]), P, f32_out)
            self.each(self.slices(grp, 4 * (mm * kk + kk * nn + mm * nn)), body)
        return cycles

    def _segments(self, step, tiles, pcs, a, a_bytes, K, N, eb, word, seg, fl, dt, dta):
        """F_SEG_B (sim/segments.py): read and check the segment tables of the flagged
        instances, then each segment under b's operand rules. Returns a signature per
        instance (0: not segmented; equal signatures, equal axis and segment lengths) and
        (addr[n, S], geometry[n, S, 4] (length, 0, 0, 0; F_SEG_2D: r0, c0, rows, cols), nseg[n],
        kind[n]: 0 columns, 1 rows (F_SEG_K), 2 rectangles (F_SEG_2D))."""
        t, panel_h = self.t, self.panel_h
        along_k = (fl & isa.F_SEG_K) != 0
        rect = (fl & isa.F_SEG_2D) != 0
        first_fault(seg & rect & (along_k | ((fl & isa.F_TRANSPOSE_B) != 0)),
                    lambda i: "MATMUL flag F_SEG_2D with F_SEG_K or F_TRANSPOSE_B (rectangles of a plain b only)",
                    tiles, step, pcs)
        A, Ln = np.zeros((len(tiles), 0), I64), np.zeros((len(tiles), 0, 4), I64)   # Ln[.., 0]: length
        n_all = np.zeros(len(tiles), I64)
        for k_axis in (False, True, None):
            s = np.flatnonzero(seg & (rect if k_axis is None else ~rect & (along_k == k_axis)))
            if not len(s):
                continue
            amp = [t.amp_dtype(isa.DTYPE_NAMES[int(dt[i])], isa.DTYPE_NAMES[int(dta[i])]) for i in s]
            if k_axis is None:  # rectangles: (row, col) per segment packed into one key column
                pan = (fl[s] & isa.F_PANEL_B) != 0
                qk = np.array([np.lcm(t.amp_in_group[d], panel_h[dt[i]] if p else 1) for d, i, p in zip(amp, s, pan)],
                              I64)
                qn = np.array([t.amp_out_group[d] for d in amp], I64)
                inst, r0, c0, rl, cl, addr = read_rects(self, step, tiles[s], pcs[s], word[s], K[s], N[s], qk, qn)
                ln = np.stack([r0, c0, rl, cl], 1)
                unit = rl * cl * eb[s][inst]
            elif k_axis:          # whole in-channel groups, and whole micro-panels of a panel b
                pan = (fl[s] & isa.F_PANEL_B) != 0
                group = np.array([np.lcm(t.amp_in_group[d], panel_h[dt[i]] if p else 1)
                                  for d, i, p in zip(amp, s, pan)], I64)
                length, unit = K[s], N[s] * eb[s]
            else:
                group = np.array([t.amp_out_group[d] for d in amp], I64)
                length, unit = N[s], K[s] * eb[s]
            if k_axis is not None:
                inst, start, ln, addr = read_segments(self, step, tiles[s], pcs[s], word[s], length, group,
                                                      (fl[s] & isa.F_TRANSPOSE_B) != 0, "row" if k_axis else "column")
                unit = unit[inst] * ln
                ln = np.stack([ln, 0 * ln, 0 * ln, 0 * ln], 1)
            it, ip = s[inst], pcs[s][inst]
            self.check_operands(isa.MATMUL, step, tiles[it], ip, {"a": (a[it], a_bytes[it], None),
                                                                  "b": (addr, unit, None)},
                                note=" (a segment of b, F_SEG_B)")
            nseg = np.bincount(inst, minlength=len(s))
            S = int(nseg.max())
            if S > A.shape[1]:
                A, Ln = np.pad(A, ((0, 0), (0, S - A.shape[1]))), np.pad(Ln, ((0, 0), (0, S - Ln.shape[1]), (0, 0)))
            j = np.arange(len(inst)) - np.repeat(np.cumsum(nseg) - nseg, nseg)
            A[it, j], Ln[it, j] = addr, ln
            n_all[s] = nseg
        kind = along_k.astype(I64) + 2 * rect            # 0 columns, 1 rows, 2 rectangles
        _, sig = np.unique(np.concatenate([kind[:, None], Ln.reshape(len(tiles), -1)], 1), axis=0,
                           return_inverse=True)
        return np.where(seg, sig.reshape(-1) + 1, 0), (A, Ln, n_all, kind)

    def _matmul(self, tg, a, b, out, scale, mm, kk, nn, da, db, transpose_b, panel, f32_out=False):
        """panel: micro-panel height P of b (0: b is plain row-major / transposed).
        f32_out (F_F32_OUT): C times the scale, each rounded once to f32, stored as f32.
        A, B and C live in this thread's scratch buffer where the compiled loads apply.
        C is each product's exact sum rounded once to f32 (exact.matmul_f32: the AMP's
        f32 accumulation, defined as the exact sum so that no host's BLAS kernel, thread
        count or CPU changes a bit; BLAS does the float64 work where that provably cannot)."""
        n = len(tg)
        sa, sb, sc = n * mm * kk, n * kk * nn, n * mm * nn
        buf = scratch(4 * (sa + sb + sc)).view(np.float32)
        A = self._load_into(tg, a, mm * kk, da, buf[:sa].reshape(n, mm * kk))
        if isinstance(b, tuple):        # F_SEG_B: (kind, [(addresses, length)]) side by side
            kind, parts = b
            B = buf[sa:sa + sb].reshape(n, kk, nn)
            c = 0
            for addr, (w, *rc) in parts:
                if kind == 2:           # F_SEG_2D: rectangle (r0, c0, rows, cols)
                    r0, c0, rl, cl = w, *rc
                    B[:, r0:r0 + rl, c0:c0 + cl] = self._load_b(tg, addr, rl, cl, db, panel, None)
                elif kind == 1:
                    B[:, c:c + w, :] = self._load_b(tg, addr, w, nn, db, panel, None)
                else:
                    B[:, :, c:c + w] = self._load_b(tg, addr, kk, w, db, panel, None)
                c += w
        else:
            B = self._load_b(tg, b, kk, nn, db, panel, buf[sa:sa + sb])
        B = B.reshape(-1, nn, kk).transpose(0, 2, 1) if transpose_b else B.reshape(-1, kk, nn)
        C = exact.matmul_f32(A.reshape(-1, mm, kk), B, out=buf[sa + sb:sa + sb + sc].reshape(n, mm, nn))
        if f32_out:
            self._store(tg, out, (C.reshape(n, -1) * np.asarray(scale, np.float32)[:, None]).astype("<f4"))
        else:
            self._store16(tg, out, C, scale)

    def _load_b(self, tg, b, kk, nn, db, panel, out):
        """b operands [kk, nn] at (tg, b) widened to float32 (into `out`, n·kk·nn
        float32, where a compiled pass applies; None: a new array)."""
        m, n, eb = self.m, len(tg), NP_DTYPES[db].itemsize
        if panel and db in _WIDEN:      # panel order back to [k, n], widened in the same pass
            B = np.empty((n, kk, nn), np.float32) if out is None else out.reshape(n, kk, nn)
            jit.load_panels(m.flat, m.pos(tg, b), kk, nn, panel, eb, _WIDEN[db], B)
            return B
        if not panel:
            return self._load_into(tg, b, kk * nn, db, None if out is None else out.reshape(n, kk * nn)) \
                .reshape(n, kk, nn)
        B = gather(m.flat, m.pos(tg, b), kk * nn * eb)
        # same bytes, panel order: back to [k, n] (reordered as raw elements, before widening)
        B = isa.from_panel_order(B.view(f"<u{eb}"), kk, nn, panel).reshape(len(tg), -1).view(np.uint8)
        return widen(B, db).reshape(n, kk, nn)

    # ---- ADD ----------------------------------------------------------------
    def add(self, step, tiles, pcs, w):
        m = self.m
        out, s0, s1, ns, ne, st = (w[:, j] for j in range(1, 7))
        f32s = decode.fields(w[:, 0])[2] == isa.DTYPES["f32"]     # dtype2 f32: f32 sources, f16 out
        self._dims(isa.ADD, step, tiles, pcs, {"nelem": ne})
        first_fault((ns < 0) | (ns > m.tile_bytes) | (st > m.tile_bytes),
                    lambda i: f"ADD nsrc1 = {ns[i]}, stride = {st[i]} is not a valid shape", tiles, step, pcs)
        has1 = ns > 0
        a1 = isa.OPERANDS[isa.ADD]["src1"][0]
        # every partial src1 + i*stride is an aligned vector read, so the stride is too
        first_fault((ns > 1) & (st % a1 != 0),
                    lambda i: f"ADD operand src1 stride {st[i]} is not {a1}-byte aligned", tiles, step, pcs)
        nb, sb = ne * 2, ne * np.where(f32s, 4, 2)
        self.check_operands(isa.ADD, step, tiles, pcs,
                            {"out": (out, nb, None), "src0": (s0, sb, None),
                             "src1": (s1, extent(sb, ns, st), has1)})
        cycles = np.zeros(len(tiles), I64)
        for grp in groups(np.stack([ns, ne, f32s], 1)):
            k, n, f32 = int(ns[grp[0]]), int(ne[grp[0]]), bool(f32s[grp[0]])
            cycles[grp] = self.t.add_cycles(n, k, f32)
            def body(g):
                tg = tiles[g]
                if f32:                  # f32 partials: summed in f32 in order, one rounding to f16
                    acc = self._load(tg, s0[g], 4 * n, "f32")
                    for i in range(k):
                        acc += self._load(tg, s1[g] + i * st[g], 4 * n, "f32")
                    self._store16(tg, out[g], acc)
                    return
                p0, p1 = m.pos(tg, s0[g]), m.pos(tg, s1[g])
                if k > 0 and not ((p0 | p1 | st[g]) & 1).any():   # aligned operands: compiled sum
                    acc = np.empty((len(g), n), np.float32)
                    self._f16("add_f16")(m.flat16, p0 >> 1, p1 >> 1, st[g] >> 1, k, n, acc)
                else:
                    acc = self._load(tg, s0[g], 2 * n)
                    for i in range(k):   # sequential f32 accumulation: the order the kernel adds in
                        acc += self._load(tg, s1[g] + i * st[g], 2 * n)
                self._store16(tg, out[g], acc)
            self.each(self.slices(grp, 8 * n), body)
        return cycles

    # ---- COPY -----------------------------------------------------------------
    def copy(self, step, tiles, pcs, w):
        m = self.m
        dst, src, rb, rows, dst_st, src_st = (w[:, j] for j in range(1, 7))
        first_fault((rb > m.tile_bytes) | (rows > m.tile_bytes) | (dst_st > m.tile_bytes) | (src_st > m.tile_bytes),
                    lambda i: f"COPY of {rows[i]} rows of {rb[i]} B (strides {dst_st[i]}, {src_st[i]}) "
                              f"is out of range", tiles, step, pcs)
        W = isa.COPY_WORD
        for nm, v in (("row_bytes", rb), ("dst_stride", dst_st), ("src_stride", src_st)):
            first_fault(v % W != 0, lambda i: f"unencodable copy: {nm} = {v[i]} is not a multiple of "
                                              f"{W}-byte words", tiles, step, pcs)
        live = rb * rows > 0
        self.check_operands(isa.COPY, step, tiles, pcs,
                            {"dst": (dst, extent(rb, rows, dst_st), live),
                             "src": (src, extent(rb, rows, src_st), live)},
                            note=" (unencodable copy)")
        sp, dp, L = plan_chunks(m.pos(tiles, src), rb, rows, src_st, m.pos(tiles, dst), rb, rows, dst_st)
        move_within(m.flat, m.tiles, m.tile_bytes, sp, dp, L)
        nbytes = rb * rows
        cycles = np.zeros(len(tiles), I64)
        for g in groups(nbytes[:, None]):
            cycles[g] = self.t.copy_cycles(int(nbytes[g[0]]))
        return cycles

"""The compute kernels, executed batched across tiles: MATMUL (f16/fp8/f32,
mixed f16/fp8, transposed or micro-panel b), ADD, COPY, and the vector kernels GELU, BIAS,
LAYERNORM, SOFTMAX, CAST, ONLINE_SOFTMAX, ROWSCALE (f32 arithmetic in fmath.py).
The file reads top-down: module helpers (batches, widening, f16 rounding, grouping),
then `Kernels`: worker slices, operand checks, one method per opcode, `run` (the
dispatch). Per-element loops outside BLAS (operand widening, f16 stores, ADD's sums)
are compiled in jit.py, their f16 conversions by the CPU's instructions where those give
numpy's bits (F16_CPU); MATMUL/CAST scale words (immediate or per-iteration table) are
read by scales.py. Groups run in slices of ~SLICE_BYTES that the worker threads take as
they come free; a MATMUL slice widens its operands and multiplies into that thread's
scratch buffer, small enough to stay in cache until its f16 store.

One call executes one instruction on each of a set of tiles (the same round of
a superstep: no tile appears twice, so tiles are independent). Instances with
identical opcode/dtype/shape words form a group: its operands are gathered with
one fancy index (memory.gather), computed with one numpy call, scattered back.
Operand rules come from isa.OPERANDS / isa.BANK_SEPARATED, costs from Target.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np

from .. import exact, isa
from ..target import CODE, DTYPE_BYTES, INTERLEAVED
from . import decode, fmath, jit
from .fault import first_fault
from .memory import I64, Memory, extent, gather, move_within, plan_chunks, scatter
from .scales import scale_word

NP_DTYPES = {"f16": np.dtype("<f2"), "fp8": np.dtype(ml_dtypes.float8_e4m3fn), "f32": np.dtype("<f4")}


def _hex(x) -> str:
    return hex(int(x))


# Bytes of operands gathered per numpy call: bounds the simulator's temporary
# memory (float32 copies of every tile's operands) without changing any result.
BATCH_BYTES = 64 << 20
# A group of at least this many operand bytes is split over the worker threads.
SPLIT_BYTES = 1 << 20
# Worker threads for the kernels' slices (the host's cores, at most 4).
WORKERS = min(4, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else 1
# Heuristic (on): groups are cut into slices of about this many float32 bytes, which the
# worker threads take in turn as they come free (a busy core slows one thread, not the
# round). A MATMUL slice's widened operands and result then stay in the core's cache
# (2 MiB L2 here) between its widening, BLAS and the f16 store, in buffers kept per
# thread (no fresh pages per round). 0: BATCH_BYTES, one slice per thread, as before.
SLICE_BYTES = 2 << 20
# Heuristic (on): f16 <-> f32 conversions by the CPU's instructions (jit.*_hw; numpy's
# bits, NaNs fixed up, checked at start by jit.hw_f16_ok), else jit's integer arithmetic.
F16_CPU = True


def batches(g: np.ndarray, bytes_each: int, parts: int = 1):
    """Split a group into slices of at most BATCH_BYTES of operands (SLICE_BYTES if set),
    and into at least `parts` slices when it holds SPLIT_BYTES or more."""
    per = max(1, min(BATCH_BYTES, SLICE_BYTES or BATCH_BYTES) // max(int(bytes_each), 1))
    if parts > 1 and len(g) * bytes_each >= SPLIT_BYTES:
        per = min(per, -(-len(g) // parts))
    return [g[i:i + per] for i in range(0, len(g), per)]


_SCRATCH = threading.local()


def scratch(nbytes: int) -> np.ndarray:
    """This thread's scratch bytes (uint8[>= nbytes], 64-byte aligned), kept between calls:
    a MATMUL slice's widened operands and result, without fresh pages every round."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < nbytes:
        raw = np.empty(nbytes + 64, np.uint8)
        off = (-raw.ctypes.data) % 64
        buf = _SCRATCH.buf = raw[off:off + nbytes]
    return buf


# Widening by table lookup: numpy's f16 -> f32 slows ~3x on subnormal inputs and
# ml_dtypes' fp8 cast is slower still; a lookup is value-independent, and the
# tables are built with the library casts, so results are bit-identical.
_WIDEN = {"f16": np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view("<f2").astype(np.float32),
          "fp8": np.arange(256, dtype=np.uint8).view(NP_DTYPES["fp8"]).astype(np.float32)}
# fp8 bytes two at a time: entry u (a little-endian uint16) holds the float32 pair of its
# low and high byte, stored as one 8-byte item (one index per two elements: ~1.6x faster)
_FP8_PAIRS = np.stack([np.tile(_WIDEN["fp8"], 256), np.repeat(_WIDEN["fp8"], 256)], 1).copy().view("<f8").reshape(-1)


def widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Operand bytes (uint8[..., nbytes]) of `dtype` -> float32[..., nelem]."""
    if dtype == "f16":
        return _WIDEN["f16"][raw.view("<u2")]
    if dtype == "fp8":
        if raw.shape[-1] % 2 == 0 and raw.flags.c_contiguous:
            return _FP8_PAIRS[raw.view("<u2")].view(np.float32)
        return _WIDEN["fp8"][raw]
    return raw.view("<f4").copy()


def to_f16(x: np.ndarray) -> np.ndarray:
    """float32 -> float16, round-to-nearest-even, bit-identical to astype.

    numpy's conversion takes a ~20x slower software path for results below the
    f16 normal range, which deep programs reach as activations shrink.
    Those results are multiples of 2**-24: rint(|x| * 2**24) (exact scaling, one
    half-even rounding) *is* the f16 bit pattern (1024 -> the smallest normal)."""
    # numpy's slow path costs per subnormal result: when a strided sample finds
    # them rare, plain astype is cheapest (either way the bits are the same)
    tiny = np.float32(2.0 ** -14)
    flat = x.reshape(-1)
    if flat.size >= 4096 and np.count_nonzero(np.abs(flat[::61]) < tiny) * 61 * 64 < flat.size:
        return x.astype("<f2")
    small = np.abs(x) < tiny
    if not small.any():
        return x.astype("<f2")
    out = np.where(small, np.float32(0), x).astype("<f2")
    xs = x[small]
    bits = np.rint(np.abs(xs) * np.float32(2.0 ** 24)).astype(np.uint16)
    out.view(np.uint16)[small] = bits | (np.signbit(xs).astype(np.uint16) << 15)
    return out


_NO_SCALE = np.zeros(0, np.float32)


def groups(keys: np.ndarray):
    """Index arrays of the rows of keys[n, k] that are equal (each in tile order)."""
    if len(keys) == 0:
        return []
    if (keys == keys[0]).all():              # the common case: one shape on every tile
        return [np.arange(len(keys))]
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    cuts = np.flatnonzero(np.diff(inv[order])) + 1
    return np.split(order, cuts)


class Kernels:
    def __init__(self, m: Memory, target, workers: int | None = None):
        self.m = m
        self.t = target
        self.workers, self.pool = WORKERS if workers is None else workers, None
        self.panel_h = np.zeros(256, I64)        # MATMUL b dtype code -> micro-panel height (0: none)
        for d, h in target.amp_panel_elems.items():
            self.panel_h[isa.DTYPES[d]] = h
        self._hw = None        # CPU f16 conversions: decided at the first kernel (jit.warm
                               # compiles and checks them meanwhile, beside loading)

    def _f16(self, name):
        """jit's f16 loop `name`: its CPU-conversion form where F16_CPU and it passes its check."""
        if self._hw is None:
            self._hw = F16_CPU and jit.hw_f16_ok()
        return getattr(jit, name + "_hw" if self._hw else name)

    # ---- batches on worker threads ------------------------------------------------
    def slices(self, grp, bytes_each):
        return batches(grp, bytes_each, self.workers)

    def each(self, slices, fn):
        """fn(g) for every slice g of a group, on worker threads when there are several:
        numpy releases the GIL in the gathers, casts and matmuls, and slices hold
        distinct tiles, whose memories are disjoint, so no byte depends on the order.
        The calling thread is one of the workers; each takes the next slice when it is
        done with one (a list iterator's next is atomic under the GIL)."""
        if len(slices) < 2 or self.workers < 2:
            for g in slices:
                fn(g)
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.workers - 1, thread_name_prefix="sim-kernels")
        todo = iter(slices)

        def drain():
            for g in todo:
                fn(g)
        fs = [self.pool.submit(drain) for _ in range(min(self.workers, len(slices)) - 1)]
        try:
            drain()
        finally:
            for f in fs:
                f.result()

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None

    # ---- operand rules ------------------------------------------------------
    def check_operands(self, op, step, tiles, pcs, operands: dict, note: str = ""):
        """operands: name -> (addr, size, present-mask or None). Refuses, per
        operand: out of range, straddling the region boundary, misalignment,
        the wrong region class; then bank conflicts between separated pairs."""
        m, name = self.m, isa.OP_NAMES[op]
        ff = lambda bad, msg: first_fault(bad, msg, tiles, step, pcs)
        for nm, (addr, size, pres) in operands.items():
            align, rclass = isa.OPERANDS[op][nm]
            pres = np.ones(len(addr), bool) if pres is None else pres
            hi = addr + size
            rng = lambda i: f"[{_hex(addr[i])}, {_hex(hi[i])})"
            ff(pres & ~m.in_range(addr, size),
               lambda i: f"{name} operand {nm} {rng(i)} is out of range [{_hex(m.base)}, {_hex(m.end)})")
            ff(pres & (addr < m.r0) & (hi > m.r0),
               lambda i: f"{name} operand {nm} {rng(i)} straddles the region boundary {_hex(m.r0)}")
            ff(pres & (addr % align != 0),
               lambda i: f"{name} operand {nm} at {_hex(addr[i])} is not {align}-byte aligned{note}")
            if rclass == INTERLEAVED:
                ff(pres & (addr < m.r0),
                   lambda i: f"{name} operand {nm} {rng(i)} needs interleaved (128-bit) access but lies "
                             f"in region 0 (interleaved memory starts at {_hex(m.r0)})")
            elif rclass == CODE:
                ff(pres & (hi > m.r0), lambda i: f"{name} operand {nm} {rng(i)} must lie in region 0")
        for x, y in isa.BANK_SEPARATED.get(op, []):
            (ax, sx, px), (ay, sy, py) = operands[x], operands[y]
            u = self.t.bank_unit
            x0, x1, y0, y1 = u(ax), u(ax + sx - 1), u(ay), u(ay + sy - 1)
            both = np.ones(len(ax), bool) if px is None else px
            both = both & (np.ones(len(ax), bool) if py is None else py)
            ff(both & (x0 <= y1) & (y0 <= x1),
               lambda i: f"{name} operands {x} [{_hex(ax[i])}, {_hex(ax[i] + sx[i])}) and {y} "
                         f"[{_hex(ay[i])}, {_hex(ay[i] + sy[i])}) share memory element unit "
                         f"{max(x0[i], y0[i])} (bank conflict)")

    def _dims(self, op, step, tiles, pcs, dims: dict):
        """Shape words must be positive and fit a tile (keeps products in int64)."""
        name = isa.OP_NAMES[op]
        for nm, v in dims.items():
            first_fault((v <= 0) | (v > self.m.tile_bytes),
                        lambda i: f"{name} {nm} = {v[i]} is not a valid size", tiles, step, pcs)

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
        self.check_operands(isa.MATMUL, step, tiles, pcs,
                            {"a": (a, M * K * sizes[dta], None), "b": (b, K * N * sizes[dt], None),
                             "out": (out, M * N * 2, None)})
        scale = scale_word(self, step, tiles, pcs, w[:, 7], fl, isa.MATMUL)
        tr = (fl & isa.F_TRANSPOSE_B) != 0
        pan = (fl & isa.F_PANEL_B) != 0
        # The AMP engine loads a b dtype the target lists in amp_panel_elems only as
        # micro-panels (isa.panel_order): such b must be flagged F_PANEL_B, and no other
        # b layout (row-major, transposed) or dtype has a panel mode to fall back on.
        panel_h = self.panel_h
        listed = panel_h[dt] > 0
        ff = lambda bad, msg: first_fault(bad, msg, tiles, step, pcs)
        ff(pan & tr, lambda i: "MATMUL b cannot be both micro-panel (F_PANEL_B) and transposed (F_TRANSPOSE_B)")
        ff(pan & ~listed,
           lambda i: f"MATMUL b of {decode.dtype_name(dt[i])} has no micro-panel mode on this target")
        ff(listed & ~pan,
           lambda i: f"MATMUL b of {decode.dtype_name(dt[i])} is read only as micro-panels of "
                     f"{panel_h[dt[i]]} on this target: F_PANEL_B is required")
        cycles = np.zeros(len(tiles), I64)
        for grp in groups(np.stack([dt, dta, tr, pan, M, K, N], 1)):
            g0 = grp[0]
            db, da = isa.DTYPE_NAMES[int(dt[g0])], isa.DTYPE_NAMES[int(dta[g0])]
            mm, kk, nn = int(M[g0]), int(K[g0]), int(N[g0])
            cycles[grp] = self.t.matmul_cycles(mm, kk, nn, db, da)     # the panel layout costs nothing extra
            P = int(panel_h[dt[g0]]) if pan[g0] else 0
            def body(g):
                self._matmul(tiles[g], a[g], b[g], out[g], scale[g], mm, kk, nn, da, db, bool(tr[g0]), P)
            self.each(self.slices(grp, 4 * (mm * kk + kk * nn + mm * nn)), body)
        return cycles

    def _matmul(self, tg, a, b, out, scale, mm, kk, nn, da, db, transpose_b, panel):
        """panel: micro-panel height P of b (0: b is plain row-major / transposed).
        A, B and C live in this thread's scratch buffer where the compiled loads apply.
        C is each product's exact sum rounded once to f32 (exact.matmul_f32: the AMP's
        f32 accumulation, defined as the exact sum so that no host's BLAS kernel, thread
        count or CPU changes a bit; BLAS does the float64 work where that provably cannot)."""
        m, n = self.m, len(tg)
        eb = NP_DTYPES[db].itemsize
        sa, sb, sc = n * mm * kk, n * kk * nn, n * mm * nn
        buf = scratch(4 * (sa + sb + sc)).view(np.float32)
        A = self._load_into(tg, a, mm * kk, da, buf[:sa].reshape(n, mm * kk))
        if panel and db in _WIDEN:      # panel order back to [k, n], widened in the same pass
            B = buf[sa:sa + sb].reshape(n, kk, nn)
            jit.load_panels(m.flat, m.pos(tg, b), kk, nn, panel, eb, _WIDEN[db], B)
        elif not panel:
            B = self._load_into(tg, b, kk * nn, db, buf[sa:sa + sb].reshape(n, kk * nn))
        else:
            B = gather(m.flat, m.pos(tg, b), kk * nn * eb)
            if panel:    # same bytes, panel order: back to [k, n] (reordered as raw elements, before widening)
                B = isa.from_panel_order(B.view(f"<u{eb}"), kk, nn, panel).reshape(len(tg), -1).view(np.uint8)
            B = widen(B, db)
        B = B.reshape(-1, nn, kk).transpose(0, 2, 1) if transpose_b else B.reshape(-1, kk, nn)
        C = exact.matmul_f32(A.reshape(-1, mm, kk), B, out=buf[sa + sb:sa + sb + sc].reshape(n, mm, nn))
        self._store16(tg, out, C, scale)

    # ---- ADD ----------------------------------------------------------------
    def add(self, step, tiles, pcs, w):
        m = self.m
        out, s0, s1, ns, ne, st = (w[:, j] for j in range(1, 7))
        self._dims(isa.ADD, step, tiles, pcs, {"nelem": ne})
        first_fault((ns < 0) | (ns > m.tile_bytes) | (st > m.tile_bytes),
                    lambda i: f"ADD nsrc1 = {ns[i]}, stride = {st[i]} is not a valid shape", tiles, step, pcs)
        has1 = ns > 0
        a1 = isa.OPERANDS[isa.ADD]["src1"][0]
        # every partial src1 + i*stride is an aligned vector read, so the stride is too
        first_fault((ns > 1) & (st % a1 != 0),
                    lambda i: f"ADD operand src1 stride {st[i]} is not {a1}-byte aligned", tiles, step, pcs)
        nb = ne * 2
        self.check_operands(isa.ADD, step, tiles, pcs,
                            {"out": (out, nb, None), "src0": (s0, nb, None),
                             "src1": (s1, extent(nb, ns, st), has1)})
        cycles = np.zeros(len(tiles), I64)
        for grp in groups(np.stack([ns, ne], 1)):
            k, n = int(ns[grp[0]]), int(ne[grp[0]])
            cycles[grp] = self.t.add_cycles(n, k)
            def body(g):
                tg = tiles[g]
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

    # ---- vector kernels (f16 data, f32 arithmetic: fmath) ----------------------------
    def _load(self, tg, addr, nbytes, dtype="f16"):
        """Operand bytes at (tiles, addr) widened to float32[len(tg), nelem]: gathered and
        widened in one compiled pass for f16 and fp8 (bit-identical to widen's tables)."""
        return self._load_into(tg, addr, nbytes // NP_DTYPES[dtype].itemsize, dtype, None)

    def _load_into(self, tg, addr, nelem, dtype, out):
        """_load into `out` (float32[len(tg), nelem], or None: a new array) where a
        compiled pass applies; else a new array. Returns the operand."""
        m = self.m
        pos = m.pos(tg, addr)
        if dtype == "fp8" or (dtype == "f16" and not (pos & 1).any()):
            out = np.empty((len(tg), nelem), np.float32) if out is None else out
            if dtype == "fp8":
                jit.load_fp8(m.flat, pos, nelem, _WIDEN["fp8"], out)
            else:
                self._f16("load_f16")(m.flat16, pos >> 1, nelem, out)
            return out
        return widen(gather(m.flat, pos, nelem * NP_DTYPES[dtype].itemsize), dtype)

    def _store(self, tg, addr, x):
        scatter(self.m.flat, self.m.pos(tg, addr), x.reshape(len(tg), -1))

    def _store16(self, tg, addr, x, scale=None):
        """float32 results (times a per-tile f32 scale, if given) rounded to f16 and
        stored at (tiles, addr), in one compiled pass; bit-identical to
        _store(tg, addr, to_f16(x * scale))."""
        if x.dtype != np.float32:          # a float64 result would round differently
            raise TypeError(f"_store16 rounds float32 results, not {x.dtype}")
        x = np.ascontiguousarray(x).reshape(len(tg), -1)
        pos = self.m.pos(tg, addr)
        if (pos & 1).any():
            self._store(tg, addr, to_f16(x if scale is None else x * scale[:, None]))
            return
        sc = _NO_SCALE if scale is None else np.ascontiguousarray(scale, np.float32)
        self._f16("store_f16")(self.m.flat16, pos >> 1, x, sc)

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
        self._dims(isa.LAYERNORM, step, tiles, pcs, {"rows": R, "cols": C})
        nb = 2 * R * C
        self.check_operands(isa.LAYERNORM, step, tiles, pcs,
                            {"out": (out, nb, None), "src": (src, nb, None),
                             "gamma": (gamma, 2 * C, None), "beta": (beta, 2 * C, None)})
        for grp in groups(np.stack([R, C], 1)):
            r, c = int(R[grp[0]]), int(C[grp[0]])
            def body(g):
                tg = tiles[g]
                x = self._load(tg, src[g], 2 * r * c).reshape(-1, r, c)
                gm = self._load(tg, gamma[g], 2 * c).reshape(-1, 1, c)
                bt = self._load(tg, beta[g], 2 * c).reshape(-1, 1, c)
                self._store16(tg, out[g], fmath.layernorm(x, gm, bt, eps[g][:, None, None]))
            self.each(self.slices(grp, 16 * r * c), body)
        return self.t.layernorm_cycles(R, C)

    def softmax(self, step, tiles, pcs, w):
        out, src, R, C = (w[:, j] for j in range(1, 5))
        scale = w[:, 5].astype(np.uint32).view(np.float32)
        self._dims(isa.SOFTMAX, step, tiles, pcs, {"rows": R, "cols": C})
        valid = np.where(w[:, 6] == 0, C, w[:, 6])          # 0 = every column
        first_fault(valid > C, lambda i: f"SOFTMAX valid = {w[i, 6]} exceeds cols = {C[i]}", tiles, step, pcs)
        nb = 2 * R * C
        self.check_operands(isa.SOFTMAX, step, tiles, pcs, {"out": (out, nb, None), "src": (src, nb, None)})
        for grp in groups(np.stack([R, C, valid], 1)):
            r, c, v = int(R[grp[0]]), int(C[grp[0]]), int(valid[grp[0]])
            def body(g):
                tg = tiles[g]
                x = self._load(tg, src[g], 2 * r * c).reshape(-1, r, c)
                if v == c:           # every column: no zero padding to write
                    y = fmath.softmax(x, scale[g][:, None, None])
                else:
                    y = np.zeros(x.shape, np.float32)
                    y[:, :, :v] = fmath.softmax(np.ascontiguousarray(x[:, :, :v]), scale[g][:, None, None])
                self._store16(tg, out[g], y)
            self.each(self.slices(grp, 16 * r * c), body)
        return self.t.softmax_cycles(R, C, scale != np.float32(1.0))

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

    def run(self, op, step, tiles, pcs, w):
        """Execute kernel `op` on `tiles` (words w[n, INSTR_WORDS], word 0 already
        validated by decode.check); returns int64 cycles per tile."""
        fn = {isa.MATMUL: self.matmul, isa.ADD: self.add, isa.COPY: self.copy, isa.GELU: self.gelu,
              isa.LAYERNORM: self.layernorm, isa.SOFTMAX: self.softmax, isa.CAST: self.cast,
              isa.ONLINE_SOFTMAX: self.online_softmax, isa.ROWSCALE: self.rowscale, isa.BIAS: self.bias}[op]
        return np.asarray(fn(step, tiles, pcs, w), I64)


KERNELS = (isa.MATMUL, isa.ADD, isa.COPY, isa.GELU, isa.LAYERNORM, isa.SOFTMAX, isa.CAST, isa.BIAS,
           isa.ONLINE_SOFTMAX, isa.ROWSCALE)

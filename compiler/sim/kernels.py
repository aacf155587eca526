"""The compute kernels (MATMUL, ADD, COPY), executed batched across tiles.

One call executes one instruction on each of a set of tiles (the same round of
a superstep: no tile appears twice, so tiles are independent). Instances with
identical opcode/dtype/shape words form a group: its operands are gathered with
one fancy index (memory.gather), computed with one numpy call, scattered back.
Operand rules come from isa.OPERANDS / isa.BANK_SEPARATED, costs from Target.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import isa
from ..target import CODE, DTYPE_BYTES, INTERLEAVED
from .fault import first_fault
from .memory import I64, Memory, extent, gather, move, plan_chunks, scatter

NP_DTYPES = {"f16": np.dtype("<f2"), "fp8": np.dtype(ml_dtypes.float8_e4m3fn), "f32": np.dtype("<f4")}


def _hex(x) -> str:
    return hex(int(x))


# Bytes of operands gathered per numpy call: bounds the simulator's temporary
# memory (float32 copies of every tile's operands) without changing any result.
BATCH_BYTES = 64 << 20


def batches(g: np.ndarray, bytes_each: int):
    """Split a group into slices of at most BATCH_BYTES of operands."""
    per = max(1, BATCH_BYTES // max(int(bytes_each), 1))
    return [g[i:i + per] for i in range(0, len(g), per)]


# Widening by table lookup: numpy's f16 -> f32 slows ~3x on subnormal inputs and
# ml_dtypes' fp8 cast is slower still; a lookup is value-independent, and the
# tables are built with the library casts, so results are bit-identical.
_WIDEN = {"f16": np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view("<f2").astype(np.float32),
          "fp8": np.arange(256, dtype=np.uint8).view(NP_DTYPES["fp8"]).astype(np.float32)}


def widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Operand bytes (uint8[..., nbytes]) of `dtype` -> float32[..., nelem]."""
    if dtype == "f16":
        return _WIDEN["f16"][raw.view("<u2")]
    if dtype == "fp8":
        return _WIDEN["fp8"][raw]
    return raw.view("<f4").copy()


def to_f16(x: np.ndarray) -> np.ndarray:
    """float32 -> float16, round-to-nearest-even, bit-identical to astype.

    numpy's conversion takes a ~20x slower software path for results below the
    f16 normal range, which deep programs reach as activations shrink. Those
    results are multiples of 2**-24: rint(|x| * 2**24) (exact scaling, one
    half-even rounding) *is* the f16 bit pattern (1024 -> the smallest normal)."""
    small = np.abs(x) < np.float32(2.0 ** -14)
    if not small.any():
        return x.astype("<f2")
    out = np.where(small, np.float32(0), x).astype("<f2")
    xs = x[small]
    bits = np.rint(np.abs(xs) * np.float32(2.0 ** 24)).astype(np.uint16)
    out.view(np.uint16)[small] = bits | (np.signbit(xs).astype(np.uint16) << 15)
    return out


def groups(keys: np.ndarray):
    """Index arrays of the rows of keys[n, k] that are equal (each in tile order)."""
    if len(keys) == 0:
        return []
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    cuts = np.flatnonzero(np.diff(inv[order])) + 1
    return np.split(order, cuts)


class Kernels:
    def __init__(self, m: Memory, target):
        self.m = m
        self.t = target

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
    def matmul(self, step, tiles, pcs, dt, w):
        m = self.m
        first_fault(~np.isin(dt, [isa.DTYPES[d] for d in NP_DTYPES]),
                    lambda i: f"MATMUL has invalid dtype code {dt[i]}", tiles, step, pcs)
        a, b, out, M, K, N = (w[:, j] for j in range(1, 7))
        self._dims(isa.MATMUL, step, tiles, pcs, {"m": M, "k": K, "n": N})
        es = np.choose(dt - 1, [DTYPE_BYTES[isa.DTYPE_NAMES[c]] for c in (1, 2, 3)])
        self.check_operands(isa.MATMUL, step, tiles, pcs,
                            {"a": (a, M * K * es, None), "b": (b, K * N * es, None), "out": (out, M * N * 2, None)})
        scale = w[:, 7].astype(np.uint32).view(np.float32)
        cycles = np.zeros(len(tiles), I64)
        for grp in groups(np.stack([dt, M, K, N], 1)):
            d = isa.DTYPE_NAMES[int(dt[grp[0]])]
            mm, kk, nn = int(M[grp[0]]), int(K[grp[0]]), int(N[grp[0]])
            cycles[grp] = self.t.matmul_cycles(mm, kk, nn, d)
            for g in batches(grp, 4 * (mm * kk + kk * nn + mm * nn)):
                self._matmul(tiles[g], a[g], b[g], out[g], scale[g], mm, kk, nn, d)
        return cycles

    def _matmul(self, tg, a, b, out, scale, mm, kk, nn, d):
        m, es = self.m, NP_DTYPES[d].itemsize
        A = widen(gather(m.flat, m.pos(tg, a), mm * kk * es), d)
        B = widen(gather(m.flat, m.pos(tg, b), kk * nn * es), d)
        C = np.matmul(A.reshape(-1, mm, kk), B.reshape(-1, kk, nn))
        C *= scale[:, None, None]
        scatter(m.flat, m.pos(tg, out), to_f16(C).reshape(len(tg), -1))

    # ---- ADD ----------------------------------------------------------------
    def add(self, step, tiles, pcs, dt, w):
        m = self.m
        first_fault(~np.isin(dt, [0, isa.DTYPES["f16"]]),
                    lambda i: f"ADD has invalid dtype code {dt[i]} (f16 only)", tiles, step, pcs)
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
            cycles[grp] = self.t.vector_cycles(2 * n * (k + 1) + 2 * n)   # bytes read + written
            for g in batches(grp, 8 * n):
                tg = tiles[g]
                acc = widen(gather(m.flat, m.pos(tg, s0[g]), 2 * n), "f16")
                for i in range(k):   # sequential f32 accumulation: the order the kernel adds in
                    acc += widen(gather(m.flat, m.pos(tg, s1[g] + i * st[g]), 2 * n), "f16")
                scatter(m.flat, m.pos(tg, out[g]), to_f16(acc))
        return cycles

    # ---- COPY -----------------------------------------------------------------
    def copy(self, step, tiles, pcs, dt, w):
        m = self.m
        first_fault(dt != 0, lambda i: f"COPY has invalid dtype code {dt[i]}", tiles, step, pcs)
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
        move(m.flat, m.flat, sp, dp, L)
        nbytes = rb * rows
        cycles = np.zeros(len(tiles), I64)
        for g in groups(nbytes[:, None]):
            cycles[g] = self.t.copy_cycles(int(nbytes[g[0]]))
        return cycles

    def run(self, op, step, tiles, pcs, dt, w):
        fn = {isa.MATMUL: self.matmul, isa.ADD: self.add, isa.COPY: self.copy}[op]
        return fn(step, tiles, pcs, dt, w)

"""The kernel machinery of the simulator: one call executes one instruction on each of a set
of tiles (the same round of a superstep: no tile appears twice, so tiles are independent).
Instances with identical opcode/dtype/shape words form a group: its operands are gathered with
one fancy index (memory.gather), computed with one numpy call, scattered back. Operand rules
come from isa.OPERANDS / isa.BANK_SEPARATED, costs from Target.

`Kernels` is the simulator's view of them: worker slices, operand checks, loads and stores of
placed operands, and `run` (the dispatch); the opcodes are its two mixins, by kind of
arithmetic: matmul_kernels.py (MATMUL, ADD, COPY: the AMP's products, sums of partials and
byte moves) and vector_kernels.py (GELU, BIAS, LAYERNORM, SOFTMAX, CAST, ONLINE_SOFTMAX,
ROWSCALE: f16 data, f32 arithmetic in fmath.py), and merge_kernel.py (MERGE, split-key
attention's merge of partial states). Widening, f16 rounding and grouping are
operands.py. The heuristics' switches (BATCH_BYTES, SPLIT_BYTES, WORKERS, SLICE_BYTES,
F16_CPU) live here, read where a call is sliced and a loop chosen.

Per-element loops outside BLAS (operand widening, f16 stores, ADD's sums) are compiled in
jit.py, their f16 conversions by the CPU's instructions where those give numpy's bits
(F16_CPU); MATMUL/CAST scale words (immediate or per-iteration table) are read by scales.py.
Groups run in slices of ~SLICE_BYTES that the worker threads take as they come free; a MATMUL
slice widens its operands and multiplies into that thread's scratch buffer, small enough to
stay in cache until its f16 store.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import isa
from ..target import CODE, INTERLEAVED
from . import jit
from .fault import first_fault
from .matmul_kernels import MatmulKernels
from .memory import I64, Memory, gather, scatter
from .merge_kernel import MergeKernel
from .operands import _NO_SCALE, _WIDEN, NP_DTYPES, to_f16, widen
from .vector_kernels import VectorKernels


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


class Kernels(MatmulKernels, VectorKernels, MergeKernel):
    def __init__(self, m: Memory, target, workers: int | None = None):
        self.m = m
        self.t = target
        self.workers, self.pool = WORKERS if workers is None else workers, None
        self.loop = None                          # the REPEAT running (relocates F_SEG_B segment words)
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

    # ---- operand loads and stores (every kernel's) ------------------------------------
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

    def run(self, op, step, tiles, pcs, w):
        """Execute kernel `op` on `tiles` (words w[n, INSTR_WORDS], word 0 already
        validated by decode.check); returns int64 cycles per tile."""
        fn = {isa.MATMUL: self.matmul, isa.ADD: self.add, isa.COPY: self.copy, isa.GELU: self.gelu,
              isa.LAYERNORM: self.layernorm, isa.SOFTMAX: self.softmax, isa.CAST: self.cast,
              isa.ONLINE_SOFTMAX: self.online_softmax, isa.ROWSCALE: self.rowscale, isa.BIAS: self.bias,
              isa.MERGE: self.merge}[op]
        return np.asarray(fn(step, tiles, pcs, w), I64)


KERNELS = (isa.MATMUL, isa.ADD, isa.COPY, isa.GELU, isa.LAYERNORM, isa.SOFTMAX, isa.CAST, isa.BIAS,
           isa.ONLINE_SOFTMAX, isa.ROWSCALE, isa.MERGE)

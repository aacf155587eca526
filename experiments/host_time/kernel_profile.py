"""Where the simulator's kernel CPU goes, one lowered program:
`python experiments/host_time/kernel_profile.py ARTIFACTS` (ARTIFACTS as for sim_bench.py;
the compiler on PYTHONPATH is the one measured).

Runs compiler.sim.run once with timers around each kernel opcode (wall and process CPU
seconds: both worker threads) and around the MATMUL kernel's parts, in thread CPU
seconds summed over the threads: the whole per-slice body (_matmul), np.matmul (BLAS
sgemm), and jit's compiled loads and stores (their CPU-conversion forms where used; the
f16 loads, stores and ADD sums of the vector kernels are counted with them). Prints the
GFLOP multiplied and those seconds, largest first. The timers cost little beside the
kernels (a few microseconds per call).
"""
from __future__ import annotations

import collections
import sys
import time

import numpy as np

from compiler import sim
from compiler.sim import jit, kernels
from pipeline import codec

T: collections.Counter = collections.Counter()


def thread_timed(counter, obj, name, label=None):
    """obj.name wrapped: counter[label or name] += the calling thread's CPU seconds in it
    (run_parts.py uses it too)."""
    f = getattr(obj, name)

    def w(*a, **k):
        t = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            counter[label or name] += time.thread_time() - t
    setattr(obj, name, w)


def _op_timed(name):
    f = getattr(kernels.Kernels, name)

    def w(self, *a):
        t, c = time.perf_counter(), time.process_time()
        try:
            return f(self, *a)
        finally:
            T[f"{name.upper()} wall"] += time.perf_counter() - t
            T[f"{name.upper()} CPU"] += time.process_time() - c
    setattr(kernels.Kernels, name, w)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    art = argv[0]
    flop = [0]
    mm = kernels.Kernels._matmul

    def _matmul(self, tg, a, b, out, scale, m, k, n, *rest):
        flop[0] += 2 * len(tg) * m * k * n
        t = time.thread_time()
        try:
            return mm(self, tg, a, b, out, scale, m, k, n, *rest)
        finally:
            T["MATMUL body (_matmul, thread CPU)"] += time.thread_time() - t
    kernels.Kernels._matmul = _matmul
    thread_timed(T, kernels.np, "matmul", "np.matmul (BLAS)")
    for nm in ("load_panels", "load_fp8", "load_f16", "store_f16", "add_f16",
               "load_f16_hw", "store_f16_hw", "add_f16_hw"):
        if hasattr(jit, nm):
            thread_timed(T, jit, nm, f"jit.{nm}")
    for op in ("matmul", "add", "gelu", "bias", "layernorm", "softmax"):
        _op_timed(op)
    lo, mo = codec.load(f"{art}/lower/result.npz"), codec.load(f"{art}/model/result.npz")
    prog = lo.program
    streams = {n: np.ascontiguousarray(mo.data[n]).view(np.uint8).ravel() for n in prog.in_streams}
    del mo
    t, c = time.perf_counter(), time.process_time()
    sim.run(prog, streams)
    print(f"sim.run: wall {time.perf_counter() - t:.1f} s, CPU {time.process_time() - c:.1f} s; "
          f"MATMUL {flop[0] / 1e9:.0f} GFLOP")
    for k, v in T.most_common():
        print(f"{k:36s} {v:7.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

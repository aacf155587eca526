"""The simulator's f16 conversions alone, in cache: `python experiments/host_time/f16_convert_bench.py`.
Nanoseconds per element (best of 5 × 1000 calls on 200,000 elements, one thread) of
widening f16 -> f32 and rounding f32 -> f16, by jit's integer loops (load_f16, store_f16)
and by its CPU-conversion loops (load_f16_hw, store_f16_hw), each on one row."""
import time

import numpy as np

from compiler.sim import jit

N, CALLS = 200_000, 1000


def best(fn):
    fn()
    t = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        t.append(time.perf_counter() - t0)
    return min(t) / CALLS / N * 1e9


def main():
    rng = np.random.default_rng(0)
    h = rng.integers(0, 0x7C00, N).astype(np.uint16)
    x = rng.standard_normal((1, N)).astype(np.float32)
    w, o, p, none = np.empty((1, N), np.float32), np.empty(N, np.uint16), np.zeros(1, np.int64), np.zeros(0, np.float32)
    print(f"CPU conversion passes its check here: {jit.hw_f16_ok()}")
    for name, fn in (("widen, integer (load_f16)", lambda: jit.load_f16(h, p, N, w)),
                     ("widen, CPU (load_f16_hw)", lambda: jit.load_f16_hw(h, p, N, w)),
                     ("round, integer (store_f16)", lambda: jit.store_f16(o, p, x, none)),
                     ("round, CPU (store_f16_hw)", lambda: jit.store_f16_hw(o, p, x, none))):
        print(f"{name:28s} {best(fn):6.3f} ns/element")


if __name__ == "__main__":
    main()

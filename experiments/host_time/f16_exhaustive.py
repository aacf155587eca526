"""The compiled f32 -> f16 roundings against numpy's astype on every one of the
2**32 float32 bit patterns: the simulator's two (compiler/sim/jit.py: f16 bits by integer
arithmetic, `sim`, and by the CPU's conversion with NaNs fixed up, `sim-cpu`) and the
reference's (compiler/reference_ops.py, in place as float32 values; independent code).
`python experiments/host_time/f16_exhaustive.py` (a minute or two on one core; prints
the mismatches, exit 1 if any). tests/sim/test_jit.py and tests/test_reference.py
check samples of the same."""
import sys
import time

import numpy as np

from compiler import reference_ops
from compiler.sim import jit

CHUNK = 1 << 26


def main():
    t, bad = time.perf_counter(), {"sim": 0, "sim-cpu": 0, "reference": 0}
    got, cpu = np.empty(CHUNK, np.uint16), np.empty(CHUNK, np.uint16)
    for c in range(0, 1 << 32, CHUNK):
        b = np.arange(c, c + CHUNK, dtype=np.uint64).astype(np.uint32)
        with np.errstate(all="ignore"):
            want = b.view(np.float32).astype(np.float16)
        jit.f16_bits(b.view(np.float32), got)
        jit.store_f16_hw(cpu, np.zeros(1, np.int64), b.view(np.float32)[None], np.zeros(0, np.float32))
        r = b.copy()
        reference_ops._round_f32_inplace(r)
        for name, d in (("sim", np.flatnonzero(want.view(np.uint16) != got)),
                        ("sim-cpu", np.flatnonzero(want.view(np.uint16) != cpu)),
                        ("reference", np.flatnonzero(want.astype(np.float32).view(np.uint32) != r))):
            bad[name] += len(d)
            for i in d[:3]:
                print(f"{name} {b[i]:#010x}: numpy {want.view(np.uint16)[i]:#06x}, got {got[i]:#06x} / {r[i]:#010x}")
    print(f"mismatches over 2**32 float32 values: {bad} ({time.perf_counter() - t:.0f} s)")
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

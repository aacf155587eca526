"""The simulator's compiled f32 -> f16 rounding (compiler/sim/jit.py) against numpy's
astype on every one of the 2**32 float32 bit patterns:
`python experiments/host_time/f16_exhaustive.py` (about a minute on one core; prints
the mismatches, exit 1 if any). tests/sim/test_jit.py checks a sample of the same."""
import sys
import time

import numpy as np

from compiler.sim import jit

CHUNK = 1 << 26


def main():
    t, bad = time.perf_counter(), 0
    got = np.empty(CHUNK, np.uint16)
    for c in range(0, 1 << 32, CHUNK):
        b = np.arange(c, c + CHUNK, dtype=np.uint64).astype(np.uint32)
        with np.errstate(all="ignore"):
            want = b.view(np.float32).astype(np.float16).view(np.uint16)
        jit.f16_bits(b.view(np.float32), got)
        d = np.flatnonzero(want != got)
        bad += len(d)
        for i in d[:3]:
            print(f"{b[i]:#010x}: numpy {want[i]:#06x}, jit {got[i]:#06x}")
    print(f"{bad} mismatches over 2**32 float32 values ({time.perf_counter() - t:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

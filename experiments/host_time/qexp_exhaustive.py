"""exact._qexp at this tree against a revision's on every float32 bit pattern (2^32 inputs),
and both revisions' `_widen_cols` timed on a simulator group's b:
`python experiments/host_time/qexp_exhaustive.py REV [--reps 5]` (~10 s for the 2^32 comparison)."""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler import exact  # noqa: E402
from compiler.numba_probe import njit  # noqa: E402
from experiments.host_time.matmul_prep_bench import against, shapes  # noqa: E402
from experiments.host_time.seeding_bench import cpu  # noqa: E402    best of n, process CPU seconds


def differing(new, old) -> int:
    @njit(nogil=True)
    def count(lo, hi):
        bad = 0
        for i in range(lo, hi):
            x = np.uint32(i).view(np.float32)
            if np.int64(new(x)) != np.int64(old(x)):
                bad += 1
        return bad
    return count(0, 1 << 32)


def main() -> None:
    args, old = against(__doc__, "compiler/exact.py")
    t = time.perf_counter()
    print(f"_qexp: {differing(exact._qexp, old._qexp)} of 2^32 inputs differ ({time.perf_counter() - t:.1f} s)")
    b = shapes(np.random.default_rng(1))["sim group 140 x 82x192 @ 192x160"][1]
    bs, k, n = b.shape
    for name, mod in (("this tree", exact), (args.rev, old)):
        b64, ss, qb = np.empty((bs, k, n)), np.empty((bs, n)), np.empty((bs, n), np.int64)
        mod._widen_cols(b, b64, ss, qb)
        best = cpu(lambda: mod._widen_cols(b, b64, ss, qb), args.reps)
        print(f"{name}: _widen_cols of b {bs}x{k}x{n}: {best * 1e3:.1f} ms (CPU, best of {args.reps}), "
              f"quanta md5 {hashlib.md5(qb.tobytes()).hexdigest()[:8]}")


if __name__ == "__main__":
    main()

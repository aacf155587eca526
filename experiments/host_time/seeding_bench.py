"""CPU seconds of the model stage's per-element work on one fc1-sized tensor (1152 x 4304,
5.0 M weights; 27 So400m layers hold 392 M): drawing the values and casting them to FP8.
`python experiments/host_time/seeding_bench.py` (best of 5, process CPU time, so a busy
machine inflates them less than wall time)."""
import time

import ml_dtypes
import numpy as np

from compiler.models.fp8cast import to_fp8
from compiler.models.weights import name_rng, uniform

FP8 = ml_dtypes.float8_e4m3fn
SHAPE = (1152, 4304)


def cpu(f, reps=5):
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        f()
        best = min(best, time.process_time() - t0)
    return best


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE, dtype=np.float32)
    s = float(np.abs(x).max()) / 448
    assert np.array_equal(to_fp8(x, s).view(np.uint8), (x / np.float32(s)).astype(FP8).view(np.uint8))
    n = x.size
    rows = [("draw: standard_normal float32", lambda: rng.standard_normal(SHAPE, dtype=np.float32)),
            ("draw: random float32 (uniform)", lambda: rng.random(SHAPE, dtype=np.float32)),
            ("draw: uniform() from int16 (weights.py)", lambda: uniform(name_rng(0, "w"), SHAPE, 0.05)),
            ("cast: (x / scale).astype(float8_e4m3fn)", lambda: (x / np.float32(s)).astype(FP8)),
            ("cast: to_fp8(x, scale) (fp8cast.py)", lambda: to_fp8(x, s))]
    print("| step | CPU ms per 5.0 M | M elements / CPU s | 27 layers (392 M), CPU s |\n|---|---:|---:|---:|")
    for label, f in rows:
        c = cpu(f)
        print(f"| {label} | {c * 1e3:.1f} | {n / c / 1e6:.0f} | {392e6 / n * c:.1f} |")


if __name__ == "__main__":
    main()

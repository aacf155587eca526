"""The installed ml_dtypes: its import time (in a fresh process, after numpy's) and its FP8
casts of 10 M elements, best of 3 in CPU seconds. Run it once per release to compare them:

    pip install ml_dtypes==0.6.0 && python experiments/host_time/ml_dtypes_bench.py
    pip install ml_dtypes==0.7.0 && python experiments/host_time/ml_dtypes_bench.py

(Tessera casts FP8 with its own code and tables, compiler/models/fp8cast.py and
compiler/snapshot.py; the casts here say what a path through ml_dtypes would cost.)"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from experiments.host_time.seeding_bench import cpu  # noqa: E402    best of n, process CPU seconds

IMPORT = "import time, numpy; t = time.perf_counter(); import ml_dtypes; print(time.perf_counter() - t)"


def main() -> None:
    import ml_dtypes
    import numpy as np
    imports = [float(subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True,
                                    check=True).stdout) for _ in range(3)]
    f8 = ml_dtypes.float8_e4m3fn
    x = np.random.default_rng(0).standard_normal(10_000_000).astype(np.float32) * 8
    q = x.astype(f8)
    print(f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}: import {min(imports):.3f} s (best of 3); "
          f"float32 -> FP8 {cpu(lambda: x.astype(f8), 3):.3f} s, FP8 -> float32 {cpu(lambda: q.astype(np.float32), 3):.3f} s "
          "(10 M elements, best of 3, CPU s)")


if __name__ == "__main__":
    main()

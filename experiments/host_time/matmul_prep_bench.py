"""exact.matmul_f32 at this tree against a revision's, side by side in one process:
`python experiments/host_time/matmul_prep_bench.py REV [--reps 5]`.

REV's compiler/exact.py (git show) is loaded as a module of its own beside this tree's; both
run the same operands, alternating, on one thread with BLAS single-threaded (as the run
stage's kernels and the reference's evaluations do). Shapes: the reference's So400m matmuls
(fc1, fc2, attention scores), the read-back's sampled rows against a whole weight, and the
simulator's batched per-tile groups (b plain and transposed). Prints per shape the best
thread-CPU ms of each (min over --reps, after a warm-up) and whether the bytes agree."""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np
from threadpoolctl import threadpool_limits

from compiler import exact

REPO = Path(__file__).resolve().parents[2]


def shapes(rng):
    f16 = lambda *s, sc=1.0: (rng.standard_normal(s) * sc).astype(np.float16).astype(np.float32)
    fp8 = lambda *s: (rng.standard_normal(s) * 8).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * np.float32(0.0137)
    return {"reference fc1 729x1152 @ 1152x4304": (f16(729, 1152), fp8(1152, 4304)),
            "reference fc2 729x4304 @ 4304x1152": (f16(729, 4304, sc=0.3), fp8(4304, 1152)),
            "reference scores 16 x 729x72 @ 72x729": (f16(16, 729, 72), f16(16, 72, 729)),
            "read-back rows 23x1152 @ 1152x4304": (f16(23, 1152), fp8(1152, 4304)),
            "sim slice 8 x 82x192 @ 192x160 (kernels.SLICE_BYTES)": (f16(8, 82, 192), fp8(8, 192, 160)),
            "sim group 140 x 82x192 @ 192x160": (f16(140, 82, 192), fp8(140, 192, 160)),
            "sim group, b transposed": (f16(140, 82, 192), fp8(140, 160, 192).transpose(0, 2, 1))}


def module_at(rev: str, rel: str, edit=lambda src: src):
    """REV's file `rel` (git show; its source through `edit`) loaded as a module of its own."""
    src = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=REPO, check=True, capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{Path(rel).stem}_{rev}.py"
        path.write_text(edit(src))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = mod                 # a dataclass looks its module up there
        spec.loader.exec_module(mod)
    return mod


def uncached_njit(src: str) -> str:
    """A module's njit without numba's cache (the file is temporary): from numba, or numba_probe."""
    for imp in ("from numba import njit", "from .numba_probe import njit"):
        src = src.replace(imp, "from numba import njit as _njit\n"
                               "njit = lambda *a, **k: _njit(*a, **{**k, 'cache': False})", 1)
    return src


def against(doc: str, rel: str):
    """`REV [--reps N]` parsed, and REV's `rel` loaded beside this tree's (numba uncached)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("rev")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    return args, module_at(args.rev, rel, uncached_njit)


def main() -> None:
    args, old = against(__doc__, "compiler/exact.py")
    print(f"| shape | HEAD ms | {args.rev} ms | same bytes |\n|---|---:|---:|---|")
    with threadpool_limits(1, user_api="blas"):
        for name, (a, b) in shapes(np.random.default_rng(1)).items():
            best, digest = {}, set()
            for mod in (old, exact):
                mod.matmul_f32(a, b)                 # compile / warm
            for _ in range(args.reps):
                for mod in (old, exact):
                    t = time.thread_time()
                    r = mod.matmul_f32(a, b)
                    best[mod] = min(best.get(mod, 1e9), time.thread_time() - t)
                    digest.add(hashlib.md5(r.tobytes()).hexdigest())
            print(f"| {name} | {best[exact] * 1e3:.1f} | {best[old] * 1e3:.1f} | {'yes' if len(digest) == 1 else 'NO'} |")


if __name__ == "__main__":
    main()

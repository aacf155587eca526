"""The independent model's matmul (compiler/timm_model.py) at this tree against a revision's,
side by side in one process: `python experiments/host_time/timm_matmul_bench.py REV [--reps 3]
[--forward LAYERS]`.

REV's compiler/timm_model.py (git show, without numba's cache) is loaded beside this tree's;
both run the same float64 operands, alternating. Per So400m shape: the best thread-CPU
seconds of the kernel `_mm_rows` over all rows on this thread (`matmul` splits the rows over
THREADS threads), its GFLOP/s, and whether the bytes agree.
With --forward L: `model_check.model_outputs` (the whole independent forward, the model
check's) of the So400m tower at L layers, built in-process from conf/, with each revision's
kernel in turn, wall and process-CPU seconds, and whether the outputs' bytes agree."""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler import timm_model  # noqa: E402
from experiments.host_time.matmul_prep_bench import module_at, uncached_njit  # noqa: E402

SHAPES = {"qkv 729x1152 @ 1152x3456": (729, 1152, 3456), "proj 729x1152 @ 1152x1152": (729, 1152, 1152),
          "fc1 729x1152 @ 1152x4304": (729, 1152, 4304), "fc2 729x4304 @ 4304x1152": (729, 4304, 1152),
          "scores (a head) 729x72 @ 72x729": (729, 72, 729), "p.v (a head) 729x729 @ 729x72": (729, 729, 72)}


def digest(x) -> str:
    if isinstance(x, dict):
        return hashlib.md5(b"".join(x[k].tobytes() for k in sorted(x))).hexdigest()
    return hashlib.md5(x.tobytes()).hexdigest()


def kernels(old, reps: int) -> None:
    print("| shape | this tree s | GFLOP/s | REV s | GFLOP/s | same bytes |\n|---|---:|---:|---:|---:|---|")
    rng = np.random.default_rng(1)
    for name, (m, k, n) in SHAPES.items():
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        best, seen = {}, set()
        for mod in (timm_model, old):
            mod.matmul(a[:7], b[:, :9])                 # compile
        for _ in range(reps):
            for mod in (timm_model, old):
                out = np.empty((m, n))
                t = time.thread_time()
                mod._mm_rows(a, b, out, 0, m)
                best[mod] = min(best.get(mod, 1e9), time.thread_time() - t)
                seen.add(digest(out))
        gf = lambda s: 2 * m * k * n / s / 1e9
        print(f"| {name} | {best[timm_model]:.3f} | {gf(best[timm_model]):.1f} | {best[old]:.3f} | "
              f"{gf(best[old]):.1f} | {'yes' if len(seen) == 1 else 'NO'} |")


def forward(old, layers: int) -> None:
    from compiler import model_check
    from compiler.phases import model_phase
    from pipeline.config import compose
    m = model_phase(compose([f"model.layers={layers}"]))
    own = timm_model._mm_rows
    seen = set()
    for label, kernel in (("this tree", own), ("REV", old._mm_rows), ("this tree", own), ("REV", old._mm_rows)):
        timm_model._mm_rows = kernel                # matmul() looks it up at each call
        timm_model.matmul(np.ones((70, 3)), np.ones((3, 5)))   # compile outside the timing
        w, c = time.perf_counter(), time.process_time()
        seen.add(digest(model_check.model_outputs(m.graph, m.data)))
        print(f"{label}: model_outputs at {layers} layers {time.perf_counter() - w:.1f} s wall, "
              f"{time.process_time() - c:.1f} s CPU")
    timm_model._mm_rows = own
    print("same outputs:", "yes" if len(seen) == 1 else "NO")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rev")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--forward", type=int, metavar="LAYERS")
    args = ap.parse_args()
    old = module_at(args.rev, "compiler/timm_model.py", uncached_njit)
    kernels(old, args.reps)
    if args.forward:
        forward(old, args.forward)


if __name__ == "__main__":
    main()

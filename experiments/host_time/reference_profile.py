"""Where one reference evaluation's time goes: `PYTHONPATH=CHECKOUT python
experiments/host_time/reference_profile.py MODEL.npz [--unrounded]` runs compiler.reference's
`evaluate` once (f16-rounded, or unrounded) on the model artifact, BLAS on one thread as in the
stage's two-thread run, with the module's functions wrapped in timers (nested: `matmul`
includes `dot`), and prints its wall and CPU seconds and each function's CPU seconds. The
checkout on PYTHONPATH decides which reference runs (`git archive REV compiler` into a
directory for an earlier revision)."""
import argparse
import collections
import time
from pathlib import Path

from threadpoolctl import threadpool_limits

from compiler import reference as R
from pipeline import codec

# Python-level functions only: a compiled kernel that other kernels call (the f16 rounding)
# must stay the dispatcher they were compiled against
NAMES = ("dot", "matmul", "softmax", "gelu", "layernorm", "_value", "_lookup", "_round_fresh", "_op")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--unrounded", action="store_true")
    a = ap.parse_args()
    seconds = collections.Counter()

    def timer(name, f):
        def g(*args, **kw):
            t = time.process_time()         # CPU seconds (all threads): comparable on a loaded machine
            try:
                return f(*args, **kw)
            finally:
                seconds[name] += time.process_time() - t
        return g

    for n in NAMES:
        if hasattr(R, n):
            setattr(R, n, timer(n, getattr(R, n)))
    m = codec.load(a.model, 1 << 20)
    g = m.graph
    keep = {t.name for t in g.of_kind("output")} | set(g.ops[-1].inputs)
    with threadpool_limits(1, user_api="blas"):
        t, c = time.perf_counter(), time.process_time()
        R.evaluate(g, m.data, not a.unrounded, keep)
        print(f"{R.__file__}, {'unrounded' if a.unrounded else 'rounded'}: "
              f"{time.perf_counter() - t:.2f} s, {time.process_time() - c:.2f} CPU s")
    for k, v in seconds.most_common():
        print(f"  {k:20s} {v:6.2f} CPU s")


if __name__ == "__main__":
    main()

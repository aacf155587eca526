"""exchange_check.compare_moves here against a revision's, side by side in one process:
`python experiments/host_time/compare_moves_bench.py REV [--reps 5]`.

20,000 transfers at random addresses on 1,472 tiles of 624 KiB, each 9,216 bytes in rows of
2,304, 96 or 16 bytes, every destination written as a copy of its source (the check's common
case; later copies may overwrite earlier ones, so some differ). Prints per row size each
revision's best GiB/s compared and whether the counts agree."""
from __future__ import annotations

import time

import numpy as np

from compiler import exchange_check
from matmul_prep_bench import against   # this directory (sys.path[0] when run as a script)


def transfers(rng, flat, T, tb, rb, n=20_000):
    rows = 9216 // rb
    src, dst = rng.integers(0, T, n), rng.integers(0, T, n)
    saddr, daddr = rng.integers(0, tb - 2 * rb * rows, n), rng.integers(0, tb - 2 * rb * rows, n)
    sstride, dstride = np.full(n, 2 * rb), np.full(n, rb)
    for j in range(n):
        for r in range(rows):
            s, d = src[j] * tb + saddr[j] + r * sstride[j], dst[j] * tb + daddr[j] + r * dstride[j]
            flat[d:d + rb] = flat[s:s + rb]
    cols = (np.zeros(n), src, saddr, np.full(n, rb), np.full(n, rows), sstride, dst, daddr, np.full(n, rb),
            np.full(n, rows), dstride)
    return [np.asarray(c, np.int64) for c in cols], n * rows * rb


def main() -> None:
    args, old = against(__doc__, "compiler/exchange_check.py")
    rng = np.random.default_rng(0)
    T, tb = 1472, 638976
    flat = rng.integers(0, 256, T * tb, dtype=np.uint8)
    print(f"| row bytes | here GiB/s | {args.rev} GiB/s | same counts |\n|---:|---:|---:|---|")
    for rb in (2304, 96, 16):
        cols, nbytes = transfers(rng, flat, T, tb, rb)
        best, outs = {}, {}
        for mod in (exchange_check, old):
            outs[mod] = np.zeros(len(cols[0]), np.int64)
            mod.compare_moves(flat, tb, 0, *cols, outs[mod])            # compile / warm
            for _ in range(args.reps):
                t = time.perf_counter()
                mod.compare_moves(flat, tb, 0, *cols, outs[mod])
                best[mod] = min(best.get(mod, 1e9), time.perf_counter() - t)
        same = "yes" if (outs[exchange_check] == outs[old]).all() else "NO"
        print(f"| {rb:,} | {nbytes / best[exchange_check] / 2**30:.2f} | {nbytes / best[old] / 2**30:.2f} | {same} |")


if __name__ == "__main__":
    main()

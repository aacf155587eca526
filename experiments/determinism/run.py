"""The full default trial (params.yaml composed from conf/: ipu21, 4 So400m layers) under the
three settings of tests/test_determinism.py -- OpenBLAS core types, BLAS threads, numba's
target CPU, numpy's SIMD dispatch, hash seeds -- one process after another, and every
artifact's sha256 side by side: `python experiments/determinism/run.py [WHAT]` (WHAT:
`default` (the default; minutes each), `default-reference`, `layer-reference`, `small`). Exit 1 if any differs.
Results: experiments/determinism/README.md."""
from __future__ import annotations

import json
import sys
import time

import hashes


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else "default"
    envs = hashes.environments()
    if envs is None:
        print("needs an x86-64 CPU with AVX2", file=sys.stderr)
        return 2
    runs = []
    for env in envs:
        t = time.perf_counter()
        r = hashes.in_process(env, [what])
        runs.append(r)
        s = r["settings"]
        print(f"# {json.dumps(env)}: BLAS {s['blas']}, numba {s['numba_cpu']}, "
              f"{len(s['numpy_simd'])} numpy SIMD features, {time.perf_counter() - t:.0f} s", flush=True)
    same = True
    keys = [k for k in runs[0] if k not in ("settings", "canaries")]
    for k in keys:
        for art in runs[0][k]:
            row = [r[k].get(art) for r in runs]
            same &= len(set(row)) == 1
            print(f"{k:18} {art:11} " + " ".join(row) + ("" if len(set(row)) == 1 else "   DIFFERS"))
    for c in runs[0]["canaries"]:
        print(f"{'canary':18} {c:11} " + " ".join(r["canaries"][c] for r in runs))
    print("same bytes under every setting" if same else "DIFFERENT BYTES")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""The simulator alone, revisions side by side on one lowered program:
`python experiments/host_time/sim_bench.py [--reps N] ARTIFACTS REV [REV ...]`.

ARTIFACTS holds a trial's lower/result.npz and model/result.npz (the stages' artifacts/
directory, e.g. after `dvc exp run -S model.layers=27`), read with the data-only codec
(pipeline/codec.py): so every revision compared must have it (those before it wrote
pickles, which nothing here loads; the figures in README.md were taken before that). For each revision: a detached
worktree, then in a fresh process with that revision's compiler on PYTHONPATH,
`compiler.sim.run` of the same program and streams. Prints wall and CPU seconds (CPU
time is the fairer figure on a shared machine; BLAS's own threads are counted in it),
the load average, peak RSS, and a digest of the outputs and cycle counts, which must
agree between revisions (the simulator is byte-exact). With --reps N every revision
runs N times, the revisions interleaved (rev1, rev2, rev1, rev2, ...). A revision with
compiled loops (compiler/sim/jit.py) compiles them in its first run, in a fresh worktree
(numba's cache lives beside the source): run 1 includes that, later runs load it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

INNER = r'''
import hashlib, json, os, resource, sys, time
import numpy as np
from compiler import sim
from pipeline import codec
art = sys.argv[1]
lo = codec.load(f"{art}/lower/result.npz")
mo = codec.load(f"{art}/model/result.npz")
prog = lo.program
streams = {n: np.ascontiguousarray(mo.data[n]).view(np.uint8).ravel() for n in prog.in_streams}
del mo
load = os.getloadavg()[0]
t, c = time.perf_counter(), time.process_time()
r = sim.run(prog, streams)
wall, cpu = time.perf_counter() - t, time.process_time() - c
h = hashlib.sha256()
for k in sorted(r.outputs):
    h.update(r.outputs[k].tobytes())
h.update(r.tile_cycles.tobytes()); h.update(r.step_cycles.tobytes())
assert sim.__file__.startswith(os.getcwd()), (sim.__file__, os.getcwd())   # the revision's own code
print(json.dumps(dict(wall_s=round(wall, 1), cpu_s=round(cpu, 1), load=round(load, 1),
                      peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                      supersteps=len(r.step_kind), cycles=int(r.total_cycles), digest=h.hexdigest()[:16])))
'''


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    reps = 1
    if argv[:1] == ["--reps"]:
        reps, argv = int(argv[1]), argv[2:]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    art, revs = str(Path(argv[0]).resolve()), argv[1:]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sim_bench-") as d:
        trees = {}
        try:
            for rev in revs:
                sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, check=True,
                                     capture_output=True, text=True).stdout.strip()
                trees[sha] = Path(d) / sha
                subprocess.run(["git", "worktree", "add", "--detach", str(trees[sha]), sha], cwd=REPO,
                               check=True, capture_output=True)
            for rep in range(reps):          # revisions interleaved: each sees the same load drift
                for sha, tree in trees.items():
                    # cwd = the revision's tree: `python -c` puts the cwd first on sys.path,
                    # ahead of PYTHONPATH (run elsewhere, every revision imported that dir's code)
                    r = subprocess.run([sys.executable, "-c", INNER, art], cwd=str(tree),
                                       env=dict(os.environ, PYTHONPATH=str(tree)),
                                       check=True, capture_output=True, text=True)
                    rows.append(dict(rev=sha, rep=rep + 1, **json.loads(r.stdout.strip().splitlines()[-1])))
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)
    print("| revision | run | wall s | CPU s | load | peak MiB | supersteps | cycles | digest |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['rev']} | {r['rep']} | {r['wall_s']} | {r['cpu_s']} | {r['load']} | {r['peak_rss_mib']:,} | "
              f"{r['supersteps']} | {r['cycles']:,} | {r['digest']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The reference against an earlier revision's, on one model artifact:
`python experiments/host_time/reference_diff.py MODEL.npz REV [--device OUTPUT.npz] [--runs N]`.

Loads compiler/reference.py as it was at REV (git show; it imports only compiler.ir and
compiler.models.gemm, taken from this checkout, and, from the revision that split its
arithmetic out on, compiler/reference_ops.py, taken from REV too), evaluates both on the artifact's graph and
data (artifacts/model/result.npz after `dvc exp run -S model.layers=27`, say), and prints
each revision's seconds and tolerance, how many output elements differ and by how much, and
with --device (that trial's artifacts/run/output.npz) the device's max error against each.
With --runs N it first times the two side by side: after a warm-up run each, N runs each,
alternating, each a process of its own that loads the model as the reference stage does
(large arrays read from the file when used) and runs reference_and_tolerance; per run its
wall seconds in the call and the process's CPU seconds (user + system), then the medians.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from compiler import reference  # noqa: E402
from compiler.compare import real_rows  # noqa: E402
from pipeline import codec  # noqa: E402


def _module_at(rev: str, path: str, name: str) -> types.ModuleType | None:
    """compiler/<path> as it was at REV, run as a module `name` of package compiler (its relative
    imports resolve in this checkout); None if REV has no such file."""
    r = subprocess.run(["git", "show", f"{rev}:compiler/{path}"], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        return None
    mod = types.ModuleType(name)
    mod.__package__ = "compiler"
    src = r.stdout.replace("cache=True", "cache=False")  # numba caches only functions in files on disk
    exec(compile(src, f"{rev}:compiler/{path}", "exec"), mod.__dict__)
    return mod


def at_revision(rev: str) -> types.ModuleType:
    """REV's reference; from the revision that split its arithmetic into reference_ops.py on,
    REV's reference_ops.py with it (registered under a name of its own, so this checkout's
    reference_ops stays as it is)."""
    ops = _module_at(rev, "reference_ops.py", f"compiler._reference_ops_at_{abs(hash(rev))}")
    if ops is None:
        mod = _module_at(rev, "reference.py", f"reference_{rev}")
        if mod is None:
            raise SystemExit(f"error: {rev} has no compiler/reference.py")
        return mod
    sys.modules[ops.__name__] = ops
    r = subprocess.run(["git", "show", f"{rev}:compiler/reference.py"], cwd=REPO, check=True,
                       capture_output=True, text=True)
    src = r.stdout.replace("from .reference_ops import", f"from {ops.__name__} import")
    src = src.replace("cache=True", "cache=False")
    mod = types.ModuleType(f"reference_{rev}")
    mod.__package__ = "compiler"
    exec(compile(src, f"{rev}:compiler/reference.py", "exec"), mod.__dict__)
    return mod


CHILD = """import json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]       # the revision's compiler/ first, then this checkout
from compiler import reference
from pipeline import codec
m = codec.load(sys.argv[3], 1 << 20)            # as the reference stage loads it: lazily
t = time.perf_counter()
reference.reference_and_tolerance(m.graph, m.data)
print(json.dumps({"wall_s": time.perf_counter() - t, "file": reference.__file__}))
"""


def timed(model: Path, rev: str, runs: int) -> None:
    """Each revision's compiler/ as a package of its own (git archive; numba caches its kernels
    there as in a checkout), one warm-up run each (compiling them), then `runs` alternating."""
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"this": str(REPO), rev: tmp}
        archive = subprocess.run(["git", "archive", rev, "compiler"], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        rows = {"this": [], rev: []}
        for i in range(runs + 1):
            for name in rows:
                load = Path("/proc/loadavg").read_text().split()[0]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                out = subprocess.run([sys.executable, "-c", CHILD, roots[name], str(REPO), str(model)],
                                     check=True, capture_output=True, text=True).stdout
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if not i:
                    continue                          # warm-up: numba compiles and caches
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                wall = json.loads(out.splitlines()[-1])["wall_s"]
                rows[name].append((wall, cpu))
                print(f"run {i} {name}: {wall:.2f} s in the call, process {cpu:.2f} CPU s, load {load}", flush=True)
        for name, r in rows.items():
            print(f"{name}: median {statistics.median(w for w, _ in r):.2f} s, "
                  f"{statistics.median(c for _, c in r):.2f} CPU s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("rev")
    ap.add_argument("--device", type=Path)
    ap.add_argument("--runs", type=int, default=0)
    a = ap.parse_args()
    if a.runs:
        timed(a.model, a.rev, a.runs)
    m = codec.load(a.model)
    outs = {}
    for name, mod in (("this", reference), (a.rev, at_revision(a.rev))):
        t = time.perf_counter()
        outs[name], tol = mod.reference_and_tolerance(m.graph, m.data)
        print(f"{name}: {time.perf_counter() - t:.1f} s, tolerance {tol:.4f}")
    dev = np.load(a.device) if a.device else None
    for k, v in outs["this"].items():
        keep = real_rows(m.graph, k)
        new, old = (o[k][keep].astype(np.float64) for o in (outs["this"], outs[a.rev]))
        d = np.abs(new - old)
        line = f"{k}: {int((d > 0).sum())} of {d.size} elements differ, by up to {d.max():.4f}"
        if dev is not None:
            got = dev[k].reshape(v.shape)[keep].astype(np.float64)
            line += f"; device max error {np.abs(got - new).max():.4f} (this) / {np.abs(got - old).max():.4f} ({a.rev})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The reference against an earlier revision's, on one model artifact:
`python experiments/host_time/reference_diff.py MODEL.npz REV [--device OUTPUT.npz]`.

Loads compiler/reference.py as it was at REV (git show; it imports only compiler.ir and
compiler.models.gemm, taken from this checkout), evaluates both on the artifact's graph and
data (artifacts/model/result.npz after `dvc exp run -S model.layers=27`, say), and prints
each revision's seconds and tolerance, how many output elements differ and by how much, and
with --device (that trial's artifacts/run/output.npz) the device's max error against each.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from compiler import reference  # noqa: E402
from compiler.readback import real_rows  # noqa: E402
from pipeline import codec  # noqa: E402


def at_revision(rev: str) -> types.ModuleType:
    src = subprocess.run(["git", "show", f"{rev}:compiler/reference.py"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType(f"reference_{rev}")
    mod.__package__ = "compiler"                   # its relative imports resolve in this checkout
    exec(compile(src, f"{rev}:compiler/reference.py", "exec"), mod.__dict__)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("rev")
    ap.add_argument("--device", type=Path)
    a = ap.parse_args()
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

"""The independent model's weight export (compiler/models/export.py TimmState) at this tree
against a revision's, side by side in one process:
`python experiments/host_time/export_bench.py MODEL_RESULT.npz REV [--reps 3]`.

MODEL_RESULT.npz: a model stage's artifacts/model/result.npz (a 27-layer export: measure.py
--work). REV's export.py (git show) is loaded as a module of its own; both export every
weight of the trial, alternating, on one thread. Per revision, the best thread-CPU seconds
(min over --reps) of:
  - forward: every Linear weight as timm_model.linear hands it to its matmul (Wᵀ, C order),
  - weights check: model_check.weights_check with that revision's TimmState (the check
    compares in the layout the export gives),
and whether the products agree (the weights' bytes, the check's figures)."""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from compiler import model_check  # noqa: E402
from matmul_prep_bench import module_at  # noqa: E402  (this directory: the script's own)
from compiler.models import export  # noqa: E402
from pipeline import codec  # noqa: E402


def forward_weights(cls, g, data) -> tuple[float, str]:
    """Every Linear weight as timm_model.linear reads it (np.asarray float64, .T, then the
    matmul's C-order copy if it is not one already); thread seconds and a digest."""
    sd, h = cls(g, data), hashlib.md5()
    t = time.thread_time()
    for key in sd:
        if key.endswith(".weight") and sd.names[key][2] == "T":
            b = np.ascontiguousarray(np.asarray(sd[key], np.float64).T)
            h.update(b[:2].tobytes() + b[-2:].tobytes())
    return time.thread_time() - t, h.hexdigest()


def weights_check(cls, g, data) -> tuple[float, str]:
    keep = model_check.TimmState
    model_check.TimmState = cls
    try:
        t = time.thread_time()
        r = model_check.weights_check(g, data)
        return time.thread_time() - t, repr(r)
    finally:
        model_check.TimmState = keep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("rev")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    old = module_at(args.rev, "compiler/models/export.py")
    m = codec.load(args.model, 1 << 20)          # lazy, as the reference stage loads it
    g, data = m.graph, m.data
    revs = {"HEAD": export.TimmState, args.rev: old.TimmState}
    print(f"| part | HEAD s | {args.rev} s | same |\n|---|---:|---:|---|")
    for name, fn in (("forward's weights", forward_weights), ("weights check", weights_check)):
        best, out = {}, {}
        for _ in range(args.reps):
            for r, cls in revs.items():
                s, o = fn(cls, g, data)
                best[r] = min(best.get(r, 1e9), s)
                out.setdefault(r, o)
        same = "yes" if out["HEAD"] == out[args.rev] else f"NO: {out['HEAD']} vs {out[args.rev]}"
        print(f"| {name} | {best['HEAD']:.2f} | {best[args.rev]:.2f} | {same} |")


if __name__ == "__main__":
    main()

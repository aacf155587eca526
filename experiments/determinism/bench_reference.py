"""Time the reference phase (compiler.phases.reference_phase: both evaluations, the tolerance and,
with FP8 activations, the FP16-activation model) on this worktree's model artifact, as code at
a git revision: `python experiments/determinism/bench_reference.py [--rev REV] [--runs N] [--warmup N]`.

Run `python -m pipeline config && python -m pipeline model` first (the model artifact of
params.yaml's trial), or name overrides (`--override model.layers=27`: the model is then
built in-process by the timed revision's code). --rev extracts that revision's compiler/ into a temporary directory
(`git archive`) and imports it instead of the worktree's, so before/after run on the same
artifact and machine, side by side. The first --warmup evaluations (default 1) are not timed:
they compile numba's kernels where their cache is cold, as it always is in --rev's extracted
copy (~16 s of a 27-layer reference phase; before the warm-up, a --rev side's single run
included it). Prints the median and every run's seconds, and the
sha256 of the reference's outputs and tolerance (so the figure names what it computed)."""
from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", help="git revision whose compiler/ to time (default: the worktree's)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed evaluations first (numba's compiling)")
    ap.add_argument("--override", action="append", default=[],
                    help="build the model in-process from conf/ with this Hydra override instead of "
                         "loading artifacts/model (e.g. model.layers=27); repeatable")
    args = ap.parse_args()
    tmp = None
    if args.rev:
        tmp = tempfile.TemporaryDirectory()
        subprocess.run(f"git archive {args.rev} compiler | tar -x -C {tmp.name}", shell=True, cwd=REPO, check=True)
        sys.path.insert(0, tmp.name)
    sys.path.insert(1 if tmp else 0, str(REPO))
    import compiler
    from pipeline.stages import load_result
    assert tmp is None or compiler.__file__.startswith(tmp.name), compiler.__file__
    from compiler.phases import model_phase, reference_phase
    if args.override:
        from pipeline.config import compose
        m = model_phase(compose(args.override))
    else:
        m = load_result("model", lazy=True)
    for _ in range(args.warmup):
        reference_phase(m)
    times, digest = [], None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        r = reference_phase(m)
        times.append(time.perf_counter() - t0)
        h = hashlib.sha256()
        for name in sorted(r.outputs):
            h.update(name.encode() + r.outputs[name].tobytes())
        h.update(repr(r.tolerance).encode())
        digest = h.hexdigest()[:16]
    print(f"{args.rev or 'worktree'}: median {statistics.median(times):.2f} s over {args.runs} runs "
          f"({', '.join(f'{t:.2f}' for t in times)}); tolerance {r.tolerance!r}; outputs+tolerance sha256 {digest}")


if __name__ == "__main__":
    main()

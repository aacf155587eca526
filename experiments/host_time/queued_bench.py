"""Queued experiments from a warm workspace, revisions side by side:
`python experiments/host_time/queued_bench.py [--layers 3 2 5] REV [REV ...]`.

Per revision: a fresh clone checked out at REV in a temporary directory, `dvc repro` of its
committed trial (so the workspace holds what a user's does after a run: artifacts and numba's
compiled kernels in __pycache__), then per value of --layers one `dvc exp run --queue -S
model.layers=N` and `dvc exp run --run-all -j 1`, timed (wall seconds of the run-all: DVC's
temporary checkout and every stage in it). Prints a markdown table; the clones are removed.
Nothing else should run meanwhile (2 cores: the figures are wall times)."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def sh(cmd: str, cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, shell=True, cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="+")
    ap.add_argument("--layers", type=int, nargs="+", default=[3])
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(dir=REPO.parent) as tmp:
        for rev in args.revs:
            d = Path(tmp) / rev
            subprocess.run(["git", "clone", "-q", str(REPO), str(d)], check=True)
            subprocess.run(["git", "checkout", "-q", rev], cwd=d, check=True)
            rows[rev] = [sh("dvc repro -q", d)]
            for n in args.layers:
                sh(f"dvc exp run --queue -q -S model.layers={n}", d)
                rows[rev].append(sh("dvc exp run --run-all -j 1", d))
            shutil.rmtree(d)
    print("| revision | `dvc repro` s | " + " | ".join(f"queued, {n} layers s" for n in args.layers) + " |")
    print("|---|---:|" + "---:|" * len(args.layers))
    for rev, r in rows.items():
        print(f"| {rev} | " + " | ".join(f"{x:.1f}" for x in r) + " |")


if __name__ == "__main__":
    main()

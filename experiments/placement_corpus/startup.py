"""CLI start-up: wall time of `python -m compiler.place solve` (a fresh interpreter each
time, as a user runs it) on a 4-buffer CSV the greedy orders place, and on a small
zero-slack CSV that needs the compiled search kernels (numba's cache warm: the
first of the runs loads or compiles them, the median shows the warm cost).

    .venv/bin/python experiments/placement_corpus/startup.py [--runs 5]

Prints the median and every run, and the load average before and after (the
machine is shared: say how loaded it was next to any figure)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SMALL = "id,lower,upper,size\n0,0,3,4\n1,3,9,4\n2,0,9,4\n3,9,21,4\n"   # capacity 12


def _zero_slack_csv() -> str:
    """An 80-request guillotine tiling of 64 events x 4096 B (no slack: first fit fails)."""
    sys.path.insert(0, str(ROOT / "tests" / "place"))
    from place_cases import guillotine_rects
    rects = guillotine_rects(2, 80, 4096, 64)
    return "id,lower,upper,size\n" + "".join(f"r{i},{t0},{t1},{a1 - a0}\n"
                                             for i, (t0, t1, a0, a1) in enumerate(rects))


def wall(path: Path, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "compiler.place", "solve", str(path)],
                           cwd=ROOT, capture_output=True, text=True)
        out.append(time.perf_counter() - t)
        if r.returncode != 0:
            raise SystemExit(f"{path.name}: exit {r.returncode}: {r.stdout}{r.stderr}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        small, zs = Path(d) / "small.12.csv", Path(d) / "zs.4096.csv"
        small.write_text(SMALL)
        zs.write_text(_zero_slack_csv())
        print(f"load average before: {os.getloadavg()}")
        for name, f in (("4-buffer CSV (greedy)", small), ("80-request zero-slack CSV (kernels)", zs)):
            w = sorted(wall(f, a.runs))
            print(f"{name}: median {w[len(w) // 2]:.3f} s wall over {a.runs} runs "
                  f"({', '.join(f'{x:.3f}' for x in w)})")
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

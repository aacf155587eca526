"""The same 8-trial tiny GEMM sweep three ways, side by side: `pipeline.trial --multirun`
(Hydra's launcher, one process), `pipeline.sweep executor=sync` (this sweep runner, in
process) and `pipeline.sweep executor=processes executor.workers=2` (a loopback Dask
cluster of 2 worker processes), each from an empty store, then the sweep again over its
now-full store. Wall and CPU seconds (medians of --runs; CPU: the command and every process
it waited for, Dask's workers included), and the load average when each run started (the
machine is shared: wall time is not CPU time).

    python experiments/cluster_sweep/bench.py --runs 3
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEP = ["model=gemm", "target=tiny", "model.m=32,48,64,80", "policy.exchange_table_cap=65536,16"]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)   # waited-for descendants: Dask's workers too
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str]) -> tuple[float, float, float]:
    load, c0 = os.getloadavg()[0], cpu()
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, cpu() - c0, load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    n = ap.parse_args().runs
    py = sys.executable
    rows: dict[str, list[tuple[float, float, float]]] = {}
    for _ in range(n):
        with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
            t = Path(tmp)
            store = lambda name: f"store={t / name}"
            runs = {
                "pipeline.trial --multirun": [py, "-m", "pipeline.trial", "--multirun", store("a"),
                                              f"hydra.sweep.dir={t / 'multirun'}", *SWEEP],
                "pipeline.sweep executor=sync": [py, "-m", "pipeline.sweep", "--dir", str(t / "s1"),
                                                 "executor=sync", store("b"), *SWEEP],
                "pipeline.sweep executor=processes (2 workers)": [
                    py, "-m", "pipeline.sweep", "--dir", str(t / "s2"), "executor=processes",
                    "executor.workers=2", f"executor.temp_dir={t / 'dask'}", store("c"), *SWEEP],
                "... again, every phase in the store": [
                    py, "-m", "pipeline.sweep", "--dir", str(t / "s3"), "executor=processes",
                    "executor.workers=2", f"executor.temp_dir={t / 'dask'}", store("c"), *SWEEP],
            }
            for name, cmd in runs.items():
                rows.setdefault(name, []).append(timed(cmd))
    print(f"| 8 tiny GEMM trials ({n} runs) | wall s, median | CPU s, median | wall s, each run | load at start |")
    print("|---|---|---|---|---|")
    for name, v in rows.items():
        walls = [w for w, _, _ in v]
        print(f"| {name} | {statistics.median(walls):.1f} | {statistics.median(c for _, c, _ in v):.1f} | "
              f"{', '.join(f'{w:.1f}' for w in walls)} | {', '.join(f'{ld:.1f}' for _, _, ld in v)} |")


if __name__ == "__main__":
    main()

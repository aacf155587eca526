"""Bounded memory of expand: peak RSS of the expand stage (process tree, from the
host monitor: host.expand.peak_rss_mib) when the number of plan candidates grows 10x.

    python experiments/bounded_memory/run.py [--n 16] [--factor 10] [--executor threads]

Each point runs the real stages (`python -m pipeline model|plan|expand`) in a scratch
copy of the repository with a fresh store (nothing cached), on the 1472-tile ipu21
target with the 512x1152x1152 f16 GEMM; writes results.json beside this file."""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
COPY = ["compiler", "pipeline", "conf", "params.yaml", "pyproject.toml"]


def point(n: int, executor: str, scratch: Path) -> dict:
    d = scratch / f"n{n}"
    for name in COPY:
        src = REPO / name
        (shutil.copytree(src, d / name, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir()
         else shutil.copy(src, d / name))
    p = yaml.safe_load((d / "params.yaml").read_text())
    p["target"] = yaml.safe_load((REPO / "conf" / "target" / "ipu21.yaml").read_text())
    p["model"].update(m=512, k=1152, n=1152, dtype="f16")
    p["policy"]["plan_candidates"] = n
    p["executor"]["kind"] = executor
    p["store"] = str(d / "store")
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    for ph in ("model", "plan", "expand"):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "pipeline", ph], cwd=d, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{ph} failed for n={n}:\n{r.stderr}")
        wall = time.perf_counter() - t0
    m = json.loads((d / "metrics" / "expand.json").read_text())
    plan = json.loads((d / "metrics" / "plan.json").read_text())["plan"]
    host = json.loads((d / "metrics" / "host" / "expand.json").read_text())   # untracked host figures
    return {"candidates": plan["candidates"], "screened": m["expand"].get("screened"),
            "finalists": m["expand"]["finalists"], "peak_rss_mib": host["peak_rss_mib"],
            "elapsed_s": host["elapsed_s"], "stage_wall_s": round(wall, 2),
            "result_npz_mib": round((d / "artifacts" / "expand" / "result.npz").stat().st_size / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--executor", default="threads")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bounded-memory-") as tmp:
        pts = [point(n, a.executor, Path(tmp)) for n in (a.n, a.n * a.factor)]
    growth = pts[1]["peak_rss_mib"] / pts[0]["peak_rss_mib"] - 1
    out = {"executor": a.executor, "points": pts, "rss_growth": round(growth, 4), "within_25_percent": growth <= 0.25}
    (HERE / f"results-{a.executor}.json").write_text(json.dumps(out, indent=2) + "\n")
    for p in pts:
        print(f"{p['candidates']:5d} candidates: expand peak RSS {p['peak_rss_mib']:.1f} MiB, "
              f"{p['elapsed_s']:.1f} s in the stage")
    print(f"peak RSS growth for {a.factor}x candidates: {growth:+.1%} "
          f"({'within' if growth <= 0.25 else 'OVER'} the 25 % bound)")


if __name__ == "__main__":
    main()

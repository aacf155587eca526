"""Wall time of `dvc exp run -S model.layers=N` from a fresh clone (empty store, empty DVC
cache, no numba cache), as a user sees it, for revisions side by side:
`python experiments/host_time/exp_run.py [--layers 27] [--runs 3] [--json F] REV [REV ...]`.

Each run: `git clone` of this repository into a temporary directory, `git checkout REV`,
then the command, its output lines time-stamped. Prints per run the wall time, the seconds
inside the stages (their own monitors, metrics/host/), each stage's span in DVC's log
(`Running stage` to its lock-file update: the process and DVC's hashing of its outputs) and
the load average before and after (the machine may be shared: say how busy it was). Runs
alternate between the revisions, so drift in the machine's load hits them alike.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def one(rev: str, layers: int) -> dict:
    env = dict(os.environ, DVC_NO_ANALYTICS="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    with tempfile.TemporaryDirectory(prefix="exp-run-") as d:
        tree = Path(d) / "t"
        subprocess.run(["git", "clone", "-q", str(REPO), str(tree)], check=True)
        subprocess.run(["git", "checkout", "-q", rev], cwd=tree, check=True)
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        p = subprocess.Popen(["dvc", "exp", "run", "-S", f"model.layers={layers}"], cwd=tree, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        spans, stage, start = {}, None, 0.0
        for line in p.stdout:
            t = time.perf_counter() - t0
            if m := re.match(r"Running stage '(\w+)'", line):
                stage, start = m.group(1), t
            elif line.startswith("Updating lock file") and stage:
                spans[stage] = round(t - start, 2)
        wall = time.perf_counter() - t0
        if p.wait():
            raise SystemExit(f"{rev}: dvc exp run failed (exit {p.returncode})")
        inside = {f.stem: json.loads(f.read_text())["elapsed_s"] for f in (tree / "metrics" / "host").glob("*.json")}
        run = json.loads((tree / "metrics" / "run.json").read_text())["run"]
    return dict(rev=rev, wall_s=round(wall, 1), in_stages_s=round(sum(inside.values()), 1), inside=inside,
                spans=spans, load=(round(load0, 2), round(os.getloadavg()[0], 2)),
                validated=run["validated"], cycles_per_layer=run["cycles_per_layer"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="+")
    ap.add_argument("--layers", type=int, default=27)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    revs = [subprocess.run(["git", "rev-parse", "--short", r], cwd=REPO, check=True, capture_output=True,
                           text=True).stdout.strip() for r in a.revs]
    res = []
    for k in range(a.runs):
        for rev in revs:
            r = one(rev, a.layers)
            res.append(r)
            print(f"{rev} run {k + 1}: {r['wall_s']} s wall, {r['in_stages_s']} s in the stages, load "
                  f"{r['load'][0]} -> {r['load'][1]}, validated {r['validated']}; spans {r['spans']}", flush=True)
    for rev in revs:
        w = [r["wall_s"] for r in res if r["rev"] == rev]
        print(f"{rev}: median {statistics.median(w)} s wall over {len(w)} run(s) ({', '.join(map(str, w))})")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

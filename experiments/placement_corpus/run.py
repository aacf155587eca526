"""Placement corpus benchmark: results table and the ablation by flag.

    .venv/bin/python experiments/placement_corpus/run.py            # everything (~25 min, 2 cores)
    .venv/bin/python experiments/placement_corpus/run.py --quick    # main + tight only

Generates the corpus (generate.py) if missing, solves every case with the
default PlaceConfig and with one flag overridden per ablation row, validates
every placement with the independent validator, and writes results.md and
results.json beside this file. CP-SAT (30 s) classifies the tight set's unknowns.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from compiler.place import PLACED, INFEASIBLE, PlaceConfig, Problem, solve, validate  # noqa: E402
from compiler.place.cpsat import solve_cpsat  # noqa: E402
from compiler.place.dump import cases, load  # noqa: E402

GREEDY = dict(search=False, canonical=False)
ABLATE = [
    ("default", {}),
    ("online first-fit only", dict(order_lifetime=False, order_alignment=False,
                                   order_end_first=False, **GREEDY)),
    ("seeds' two orders (lifetime, alignment)", dict(greedy_online=False, order_end_first=False,
                                                     **GREEDY)),
    ("+ end-first order", dict(greedy_online=False, **GREEDY)),
    ("all greedy orders", dict(**GREEDY)),
    ("search_restarts=false", dict(search_restarts=False)),
    ("must_occupy_propagation=false", dict(must_occupy_propagation=False)),
    ("must_occupy + restarts off (the seeds' search)", dict(must_occupy_propagation=False,
                                                            search_restarts=False, canonical=False)),
    ("search=false (canonical only)", dict(search=False)),
    ("canonical=false (address search only)", dict(canonical=False)),
]
ABLATE_ZS = [
    ("default", {}),
    ("canonical_skyline=false", dict(canonical_skyline=False)),
    ("canonical_restarts=false", dict(canonical_restarts=False)),
    ("section_inference=false", dict(section_inference=False)),
    ("canonical=false", dict(canonical=False)),
]


def run_set(files, cfg, cpsat=0.0):
    rows = []
    for f in files:
        p, _ = load(f)
        sol = solve(p, cfg)
        ok = sol.status != PLACED or not validate(p, sol.addr)
        assert ok, f"{f}: INVALID placement from {sol.method}"
        r = dict(case=f.name, n=len(p), status=sol.status, ms=sol.seconds * 1e3, nodes=sol.nodes,
                 method=sol.method)
        if cpsat and sol.status != PLACED:
            r["cpsat"] = solve_cpsat(p, time_limit_s=cpsat).status
        rows.append(r)
    ms = np.array([r["ms"] for r in rows])
    return dict(cases=len(rows), placed=sum(r["status"] == PLACED for r in rows),
                infeasible=sum(r["status"] == INFEASIBLE for r in rows),
                median_ms=float(np.median(ms)), p95_ms=float(np.percentile(ms, 95)),
                max_ms=float(ms.max()), rows=rows)


def greedy_250():
    rng = np.random.default_rng(0)
    n = 250
    s = rng.integers(0, 100, n)
    p = Problem(311296, 524288, 950272, 16384, size=rng.integers(64, 3000, n),
                align=2 ** rng.integers(2, 7, n), start=s, end=s + rng.integers(1, 20, n),
                region=rng.integers(0, 2, n))
    ts = []
    for _ in range(30):
        t = time.perf_counter()
        sol = solve(p)
        ts.append(time.perf_counter() - t)
    assert sol.status == PLACED and sol.method.startswith("greedy") and not validate(p, sol.addr)
    return float(np.median(ts) * 1e3)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--zs-limit", type=float, default=60.0, help="seconds per zero-slack case")
    ap.add_argument("--zs-ablation-limit", type=float, default=10.0)
    a = ap.parse_args(argv)
    root = HERE / "cases"
    if not (root / "main").exists():
        import generate
        generate.main(["--out", str(root)])
    sets = {k: cases([root / k]) for k in ("main", "tight", "zeroslack")}
    out = {"greedy_250_ms": greedy_250(), "ablation": [], "zeroslack": []}
    md = [f"Greedy 250-request tile (fits greedily): median {out['greedy_250_ms']:.2f} ms", "",
          "| configuration | main placed | main median ms | main p95 ms | main max ms "
          "| tight placed | tight median ms | tight max ms |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, ov in ABLATE:
        cfg = PlaceConfig().override(**ov)
        m = run_set(sets["main"], cfg)
        t = run_set(sets["tight"], cfg, cpsat=30.0 if name == "default" else 0.0)
        out["ablation"].append(dict(name=name, override=ov, main=m, tight=t))
        md.append(f"| {name} | {m['placed']}/{m['cases']} | {m['median_ms']:.1f} | {m['p95_ms']:.1f} "
                  f"| {m['max_ms']:.1f} | {t['placed']}/{t['cases']} | {t['median_ms']:.1f} "
                  f"| {t['max_ms']:.1f} |")
        print(md[-1], flush=True)
    d = out["ablation"][0]["tight"]["rows"]
    unk = [r for r in d if r["status"] != PLACED]
    md += ["", "Tight-set cases not placed (default): " + (", ".join(
        f"{r['case']} ({r['status']}, CP-SAT 30 s: {r.get('cpsat')})" for r in unk) or "none")
           + ". Every case is feasible by construction (its witness validates)."]
    if not a.quick:
        md += ["", "| zero-slack configuration | limit s | placed | infeasible | median s | max s |",
               "|---|---:|---:|---:|---:|---:|"]
        for name, ov in ABLATE_ZS:
            lim = a.zs_limit if name == "default" else a.zs_ablation_limit
            cfg = PlaceConfig().override(canonical_node_budget=10**9, time_limit_s=lim, **ov)
            z = run_set(sets["zeroslack"], cfg)
            out["zeroslack"].append(dict(name=name, override=ov, limit=lim, **z))
            md.append(f"| {name} | {lim:.0f} | {z['placed']}/{z['cases']} | {z['infeasible']} | "
                      f"{z['median_ms'] / 1e3:.1f} | {z['max_ms'] / 1e3:.1f} |")
            print(md[-1], flush=True)
        md += ["", "Zero-slack default, per case: " + ", ".join(
            f"{r['case'].split('-')[1]} buffers {r['status']} {r['ms'] / 1e3:.1f} s"
            for r in out["zeroslack"][0]["rows"])]
    (HERE / "results.md").write_text("\n".join(md) + "\n")
    (HERE / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

"""python -m compiler.place solve|validate|bench PATH... [options]

  solve     per case: outcome, time, search nodes, method (and the rejection
            figures when not placed); --out DIR writes <case>.solution.json
  validate  per case: check the dump's "addr" (or "witness" with --witness)
            with the independent validator; with neither, solve then validate
  bench     solve + validate every case, print per-case lines with -v and the
            summary table; --cpsat S classifies unknowns with CP-SAT (S seconds)

PATH: dump files (*.json, see dump.py), CSV benchmark files (*.csv; needs
--capacity) or folders of them. --set key=value overrides PlaceConfig keys.
Bad input exits 2 with one line naming the file and request; nothing is written.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from .config import PlaceConfig
from .dump import DumpError, cases, load
from .problem import INFEASIBLE, PLACED, UNKNOWN, ProblemError
from .solve import solve
from .validate import validate


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m compiler.place", description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=["solve", "validate", "bench"])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--capacity", type=int, help="arena bytes for CSV inputs")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="PlaceConfig override (repeatable)")
    ap.add_argument("--out", help="solve: folder for <case>.solution.json")
    ap.add_argument("--witness", action="store_true", help="validate: check the stored witness")
    ap.add_argument("--cpsat", type=float, default=0.0, metavar="SECONDS",
                    help="bench: classify unknown cases with CP-SAT")
    ap.add_argument("--json", help="bench: write per-case results and the summary here")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap.parse_args(argv)


def _cfg(sets):
    d = {}
    for s in sets:
        if "=" not in s:
            raise ValueError(f"--set expects KEY=VALUE, got {s!r}")
        k, v = s.split("=", 1)
        d[k.strip()] = v.strip()
    return PlaceConfig.from_dict(d)


def _line(name, sol, n):
    s = f"{name}: {sol.status} n={n} {sol.seconds * 1e3:.2f} ms nodes={sol.nodes} method={sol.method}"
    if sol.status != PLACED:
        s += (f" event={sol.event} live={sol.live_bytes} available={sol.available_bytes}"
              f" deficit={sol.deficit}")
        if sol.request >= 0:
            s += f" request={sol.request}"
    return s


def main(argv=None) -> int:
    a = _args(argv)
    try:
        cfg = _cfg(a.set)
        files = cases(a.paths)
        if not files:
            raise DumpError(f"no *.json or *.csv cases under {' '.join(a.paths)}")
        loaded = [(f, *load(f, a.capacity)) for f in files]  # all input checked before any output
    except (ValueError, DumpError, ProblemError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.cmd == "solve":
        return _solve(loaded, cfg, a)
    if a.cmd == "validate":
        return _validate(loaded, cfg, a)
    return _bench(loaded, cfg, a)


def _solve(loaded, cfg, a):
    out = Path(a.out) if a.out else None
    results = []
    for f, p, _ in loaded:
        sol = solve(p, cfg)
        print(_line(f.name, sol, len(p)))
        results.append((f, p, sol))
    if out:
        out.mkdir(parents=True, exist_ok=True)
        for f, p, sol in results:
            d = {"case": f.name, "status": sol.status, "method": sol.method, "nodes": sol.nodes,
                 "seconds": sol.seconds, "addr": sol.addr.tolist(), "event": sol.event,
                 "live_bytes": sol.live_bytes, "available_bytes": sol.available_bytes,
                 "deficit": sol.deficit, "request": p.name(sol.request) if sol.request >= 0 else None}
            (out / f"{f.stem}.solution.json").write_text(json.dumps(d) + "\n")
    return 0


def _validate(loaded, cfg, a):
    rc = 0
    for f, p, extra in loaded:
        key = "witness" if a.witness else "addr"
        if key in extra:
            addr, what = extra[key], key
        else:
            sol = solve(p, cfg)
            if sol.status != PLACED:
                print(_line(f.name, sol, len(p)))
                continue
            addr, what = sol.addr, f"solution ({sol.method})"
        errs = validate(p, addr)
        print(f"{f.name}: {what} {'valid' if not errs else f'INVALID ({len(errs)} errors)'}")
        for e in errs[:20]:
            print(f"  {e}")
        rc |= bool(errs)
    return rc


def _bench(loaded, cfg, a):
    rows = []
    for f, p, _ in loaded:
        sol = solve(p, cfg)
        ok = sol.status != PLACED or not validate(p, sol.addr)
        cls = ""
        if sol.status == UNKNOWN and a.cpsat > 0:
            from .cpsat import solve_cpsat
            cls = solve_cpsat(p, time_limit_s=a.cpsat).status
        rows.append(dict(case=f.name, n=len(p), status=sol.status, valid=ok, ms=sol.seconds * 1e3,
                         nodes=sol.nodes, method=sol.method, cpsat=cls))
        if a.verbose:
            print(_line(f.name, sol, len(p)) + ("" if ok else " INVALID") + (f" cpsat={cls}" if cls else ""),
                  flush=True)
    ms = np.array([r["ms"] for r in rows])
    cnt = {s: sum(r["status"] == s for r in rows) for s in (PLACED, INFEASIBLE, UNKNOWN)}
    invalid = sum(not r["valid"] for r in rows)
    summ = dict(cases=len(rows), **cnt, invalid=invalid, median_ms=float(np.median(ms)),
                p95_ms=float(np.percentile(ms, 95)), max_ms=float(ms.max()),
                nodes=int(sum(r["nodes"] for r in rows)))
    if a.cpsat > 0:
        summ["unknown_cpsat"] = {k: sum(r["cpsat"] == k for r in rows if r["cpsat"])
                                 for k in (PLACED, INFEASIBLE, UNKNOWN)}
    methods = {}
    for r in rows:
        methods[r["method"]] = methods.get(r["method"], 0) + 1
    print("| cases | placed | infeasible | unknown | invalid | median ms | p95 ms | max ms | nodes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {summ['cases']} | {cnt[PLACED]} | {cnt[INFEASIBLE]} | {cnt[UNKNOWN]} | {invalid} | "
          f"{summ['median_ms']:.2f} | {summ['p95_ms']:.2f} | {summ['max_ms']:.2f} | {summ['nodes']} |")
    print("methods: " + ", ".join(f"{k} {v}" for k, v in sorted(methods.items())))
    if "unknown_cpsat" in summ:
        print("unknowns by CP-SAT: " + ", ".join(f"{k} {v}" for k, v in summ["unknown_cpsat"].items()))
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": summ, "methods": methods, "cases": rows},
                                           indent=1) + "\n")
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())

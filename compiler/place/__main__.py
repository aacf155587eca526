"""python -m compiler.place solve|validate|bench PATH... [options]

Commands (`python -m compiler.place CMD --help` for each one's options)
  solve PATH...       per case one line: outcome, time, search nodes, method (and
                      the rejection figures when not placed). --out X.csv (one
                      input) writes the input's columns plus `offset`; --out DIR
                      writes <case>.solution.csv for CSV inputs, <case>.solution.json
                      (the dump with "addr" and the outcome) for JSON inputs.
  validate PROBLEM SOLUTION
                      check SOLUTION's placement (a CSV with an `offset` column, or
                      a JSON dump / solve output with "addr"), matched to PROBLEM's
                      buffers by id, with the independent validator.
  validate PATH...    check each case's own placement (CSV `offset` column, JSON
                      "addr", or "witness" with --witness); with none, solve it first.
  bench PATH...       solve + validate every case; -v per-case lines; a summary table.

Formats (PATH: files or folders of *.json / *.csv)
  CSV   MiniMalloc's: columns by header name in any order: id|buffer,
        lower,upper (half-open) or start,end (inclusive end), size, optional
        alignment (power of two), optional offset (validate checks it, solve
        ignores it). No header: id,lower,upper,size[,alignment]. `#` lines and
        blank lines are skipped. One arena [0, capacity): --capacity BYTES or a
        file name NAME.<capacity>.csv.
  JSON  "tessera-place-dump/1" (compiler/place/dump.py): memory map, regions,
        alignment, Repeat sequences, bank edges, reserved ranges.

Limits and budgets (--set KEY=VALUE overrides any PlaceConfig key)
  time_limit_s=60     wall-clock seconds per case for the searches; the CLI
                      default (the compiler's place phase uses node budgets).
  canonical_node_budget=0
                      0: no node limit, the time limit decides (CLI default);
                      the compiler's place phase keeps a small per-tile budget.
  search_node_budget, search_filter_budget: the address-domain search's budget
                      per part before the canonical search takes over.
  Every technique is a boolean flag (see compiler/place/config.py), e.g.
  --set canonical_skyline=false.
  The search kernels (numba) load only when a pure input (one arena, no bank
  edges) defeats the greedy orders: compiled on a checkout's first such input
  (~15 s idle), then loaded from numba's cache (~0.5 s); never counted in a
  case's time limit. A small problem starts and solves in ~0.2 s.

Exit status: 0 every case placed (validate: every placement valid); 1 some
case infeasible, unknown (time limit) or invalid; 2 bad input: one line
`error: FILE:LINE: ...`, nothing written.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from .config import PlaceConfig
from .dump import DumpError, capacity_from_name, cases, load, to_dict, write_csv
from .problem import INFEASIBLE, PLACED, UNKNOWN, ProblemError
from .solve import solve
from .validate import validate

# The CLI decides by wall clock, not by node counts (users cannot know which
# budget to raise); the compiler's place phase keeps PlaceConfig's own defaults.
CLI_DEFAULTS = {"time_limit_s": 60.0, "canonical_node_budget": 0}


_COMMON = argparse.ArgumentParser(add_help=False)
_COMMON.add_argument("paths", nargs="+", metavar="PATH", help="*.csv / *.json files or folders")
_COMMON.add_argument("--capacity", type=int, metavar="B",
                     help="arena bytes for CSV inputs (else from a name NAME.<B>.csv)")
_COMMON.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="PlaceConfig override (repeatable), e.g. time_limit_s=10")

_HELP = {   # per command: (one line, what `CMD --help` says)
    "solve": ("solve each case; one line per case",
              "Per case one line: outcome, time, search nodes, method (and the rejection\n"
              "figures when not placed). Exit 0 every case placed, 1 some infeasible or\n"
              "unknown, 2 bad input."),
    "validate": ("check a placement with the independent validator",
                 "validate PROBLEM SOLUTION: SOLUTION's placement (a CSV with an `offset`\n"
                 "column, or a JSON dump / solve output with \"addr\"), matched to PROBLEM's\n"
                 "buffers by id. A CSV PROBLEM needs its arena: --capacity B (the value\n"
                 "solve was given) or a file name NAME.<B>.csv.\n"
                 "validate PATH...: each case's own placement (CSV `offset`, JSON \"addr\",\n"
                 "or \"witness\" with --witness); with none, solve it first.\n"
                 "Exit 0 every placement valid, 1 some invalid or not placed, 2 bad input."),
    "bench": ("solve + validate every case; a summary table",
              "Solve and validate every case; -v per-case lines; a summary table\n"
              "(placed / infeasible / unknown / invalid, median / p95 / max ms)."),
}


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m compiler.place", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 usage="%(prog)s {solve,validate,bench} PATH... [options]")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{solve,validate,bench}")
    sp = {}
    for cmd, (short, desc) in _HELP.items():
        sp[cmd] = sub.add_parser(cmd, parents=[_COMMON], help=short, description=desc,
                                 prog=f"python -m compiler.place {cmd}",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        sp[cmd].set_defaults(out=None, witness=False, cpsat=0.0, json=None, verbose=False)
    sp["solve"].add_argument("--out", metavar="X.csv|DIR",
                             help="X.csv (one CSV input): its columns plus `offset`; DIR: "
                                  "<case>.solution.csv / .solution.json per case")
    sp["validate"].add_argument("--witness", action="store_true",
                                help="check each dump's stored witness instead")
    sp["bench"].add_argument("--cpsat", type=float, default=0.0, metavar="SECONDS",
                             help="classify unknown cases with CP-SAT")
    sp["bench"].add_argument("--json", metavar="FILE", help="per-case results and the summary")
    sp["bench"].add_argument("-v", "--verbose", action="store_true", help="one line per case")
    return ap.parse_args(argv)


def _cfg(sets):
    d = dict(CLI_DEFAULTS)
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
        loaded = []                       # all input checked before any output
        for f in files:
            cap = a.capacity
            if cap is None and a.cmd == "validate" and len(files) == 2 and loaded:
                cap = loaded[0][1].memory_end   # SOLUTION.csv takes PROBLEM's capacity
            if (cap is None and f.suffix.lower() == ".csv"
                    and capacity_from_name(f) is None):
                what = ("validate PROBLEM SOLUTION" if a.cmd == "validate" and len(files) == 2
                        else f"{a.cmd}")
                raise DumpError(f"{f}: a CSV problem has no arena size: {what} needs --capacity B "
                                f"(for a solution, the value solve was given) or a file name "
                                f"like {f.stem}.<B>.csv")
            loaded.append((f, *load(f, cap)))
        if a.cmd == "solve" and a.out and a.out.lower().endswith(".csv") and len(loaded) != 1:
            raise DumpError(f"--out {a.out}: a CSV solution file takes exactly one input "
                            f"(got {len(loaded)}); give a folder instead")
        pair = _pair(loaded) if a.cmd == "validate" and not a.witness else None
    except (ValueError, DumpError, ProblemError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.cmd == "solve":
        return _solve(loaded, cfg, a)
    if a.cmd == "validate":
        return _check_pair(*pair) if pair else _validate(loaded, cfg, a)
    return _bench(loaded, cfg, a)


def _solved(p, cfg):
    """solve(), and say once when it compiled the search kernels. They are
    imported only when a pure part defeats the greedy orders (search.py), so a
    small problem never loads numba (start-up ~0.2 s, not 1-4 s); their
    compilation or loading is never counted in a case's time limit."""
    sol = solve(p, cfg)
    jit = sys.modules.get(f"{__package__}.skyline_jit")
    if jit is not None and jit._WARM and jit._WARM[0] > 5.0 and not _NOTED:
        _NOTED.append(1)
        print(f"(compiled the search kernels in {jit._WARM[0]:.1f} s, once per checkout: numba "
              "caches them; not counted in any case's time)", file=sys.stderr)
    return sol


_NOTED = []


def _solution_name(f: Path) -> str:
    parts = f.name.split(".")
    if f.suffix.lower() == ".csv" and len(parts) >= 3 and parts[-2].isdigit():
        return ".".join(parts[:-2] + ["solution"] + parts[-2:])   # keeps NAME.<capacity>.csv
    return f"{f.stem}.solution{f.suffix.lower()}"


def _solve(loaded, cfg, a):
    rc = 0
    results = []
    for f, p, extras in loaded:
        sol = _solved(p, cfg)
        if sol.status == PLACED:
            errs = validate(p, sol.addr)   # never hand out an unchecked placement
            if errs:
                print(f"{f.name}: INTERNAL ERROR: invalid placement from {sol.method}: {errs[0]}")
                rc = 1
                continue
        else:
            rc = 1
        print(_line(f.name, sol, len(p)), flush=True)
        results.append((f, p, extras, sol))
    if a.out:
        out = Path(a.out)
        if out.suffix.lower() == ".csv":
            f, p, extras, sol = results[0] if results else (None,) * 4
            if sol is not None and sol.status == PLACED:
                out.parent.mkdir(parents=True, exist_ok=True)
                write_csv(out, p, sol.addr, extras)
            return rc
        out.mkdir(parents=True, exist_ok=True)
        for f, p, extras, sol in results:
            if f.suffix.lower() == ".csv":
                if sol.status == PLACED:
                    write_csv(out / _solution_name(f), p, sol.addr, extras)
                continue
            d = to_dict(p, tile=extras.get("tile"),
                        addr=sol.addr if sol.status == PLACED else None)
            d["solution"] = {"status": sol.status, "method": sol.method, "nodes": sol.nodes,
                             "seconds": sol.seconds, "event": sol.event,
                             "live_bytes": sol.live_bytes, "available_bytes": sol.available_bytes,
                             "deficit": sol.deficit,
                             "request": p.name(sol.request) if sol.request >= 0 else None}
            (out / _solution_name(f)).write_text(json.dumps(d, separators=(",", ":")) + "\n")
    return rc


def _pair(loaded):
    """validate PROBLEM SOLUTION: two files, the second carrying a placement and
    the first none. Returns (problem file, problem, addr in problem order) or None."""
    if len(loaded) != 2 or "addr" in loaded[0][2] or "addr" not in loaded[1][2]:
        return None
    (fp, p, _), (fs, q, xs) = loaded
    pos = {nm: i for i, nm in enumerate(q.names or [q.name(i) for i in range(len(q))])}
    names = p.names or [p.name(i) for i in range(len(p))]
    missing = [nm for nm in names if nm not in pos]
    if missing or len(q) != len(p):
        what = f"has no buffer {missing[0]!r}" if missing else f"has {len(q)} buffers, {fp} {len(p)}"
        raise DumpError(f"{fs}: solution {what} of {fp}")
    k = np.array([pos[nm] for nm in names])
    for fld in ("size", "start", "end", "align"):
        d = np.flatnonzero(getattr(q, fld)[k] != getattr(p, fld))
        if len(d):
            raise DumpError(f"{fs}: buffer {names[d[0]]!r}: {fld} differs from {fp}")
    return fs, p, np.asarray(xs["addr"], np.int64)[k]


def _check_pair(fs, p, addr):
    errs = validate(p, addr)
    print(f"{fs.name}: placement {'valid' if not errs else f'INVALID ({len(errs)} errors)'}")
    for e in errs[:20]:
        print(f"  {e}")
    return 1 if errs else 0


def _validate(loaded, cfg, a):
    rc = 0
    for f, p, extra in loaded:
        key = "witness" if a.witness else "addr"
        if key in extra:
            addr, what = extra[key], key
        else:
            sol = _solved(p, cfg)
            if sol.status != PLACED:
                print(_line(f.name, sol, len(p)))
                rc = 1
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
        sol = _solved(p, cfg)
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

"""Placement corpus benchmark: per set placed count, median and max seconds with
the CLI's default settings, and one ablation row per technique.

    .venv/bin/python experiments/placement_corpus/run.py default     # hard, zeroslack, tight, main
    .venv/bin/python experiments/placement_corpus/run.py wall --sets heldout-31415926
                     # per case a fresh `python -m compiler.place solve`: wall incl. start-up
    .venv/bin/python experiments/placement_corpus/run.py ablation    # hard subset + zeroslack, 10 s
    .venv/bin/python experiments/placement_corpus/run.py ablation --on seen-777 --only heavy-1000 \
                     --rows default,partner_nogoods --limit 60    # rows on chosen cases
    .venv/bin/python experiments/placement_corpus/run.py table       # results.md from the JSON files

Generates the corpus (generate.py) if missing. "Default settings" are the
CLI's (`python -m compiler.place`): `time_limit_s=60`, no node limit. Every
placement is checked by the independent validator (an invalid one aborts the
run). Results go to results-default-<sets>.json / results-ablation.json beside this file; `table` renders
results.md. The before columns (before-74c8e47.json) are this script's `default`
run at commit 74c8e47 (main before partner folding; earlier befores, 94cfe97
and 39be7f4, are kept in before-94cfe97.json and before-39be7f4.json).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from compiler.place import PLACED, INFEASIBLE, PlaceConfig, solve, validate  # noqa: E402
from compiler.place.__main__ import CLI_DEFAULTS  # noqa: E402
from compiler.place.dump import cases, load  # noqa: E402

SETS = ("hard", "zeroslack", "tight", "main")
# Fresh seeds of the hard set's 36 shapes and sizes (generate.py --hard-seed0 S):
# SEEN were looked at while tuning (the misses in issue #29 came from them);
# HELDOUT are never tuned on. Adjusting the solver for a held-out miss makes the
# list spent: replace it with new seeds and say so in README.md.
# 9001, 9002: looked at to diagnose partner_nogoods' chains (no change made after them)
SEEN = (20267912, 777, 9001, 9002)
HELDOUT = (31415926, 27182818)
# A second held-out list, added with `partner_nogoods` (never looked at before the
# change was final): the first list was run after the change as well, and both are
# reported; neither was tuned on.
HELDOUT2 = (16180339, 14142136)
# A third, added with `equal_turns` (after HELDOUT2's run had shown its misses: a
# change made after seeing them is checked on seeds never run before).
HELDOUT3 = (11235813, 30103000)
# A fourth, added with `eager_refolds` (issue #29, third round): HELDOUT2
# and HELDOUT3's misses were profiled and tuned on (they are spent, like SEEN); this
# list was run once, after the change was final, and is reported on its own.
HELDOUT4 = (57721566, 69314718)   # issue #29 fourth round: profiled and tuned on (spent)
# A fifth, written down (sqrt 5 = 2.2360679..., sqrt 7 = 2.6457513...) before the
# fourth round's change was measured on anything: run once, at the end, reported
# on its own whatever it says.
HELDOUT5 = (22360679, 26457513)   # issue #29 fifth round: its misses tuned on (spent)
# A sixth, written down (sqrt 3 = 1.7320508..., sqrt 6 = 2.4494897...) at the start of the
# fifth round, run once before that round's change (the "before" column) and once after.
HELDOUT6 = (17320508, 24494897)
# A seventh (sqrt 10 = 3.1622776..., sqrt 11 = 3.3166247...), written down at the start of the
# sixth round (2026-12-02), run once before that round's changes and once after.
HELDOUT7 = (31622776, 33166247)
# An eighth (sqrt 13 = 3.6055512..., sqrt 14 = 3.7416573...), written down at the start of the
# seventh round (2026-12-02, before any of its changes); run once after that round's change.
HELDOUT8 = (36055512, 37416573)
EXTRA = (tuple(f"seen-{s}" for s in SEEN)
         + tuple(f"heldout-{s}" for s in HELDOUT + HELDOUT2 + HELDOUT3 + HELDOUT4
                                                          + HELDOUT5 + HELDOUT6 + HELDOUT7 + HELDOUT8))
ABLATE = [  # (row, overrides) on the hard subset and zero-slack at 10 s per case
    ("default", {}),
    ("compiled_skyline=false (Python searches only)", dict(compiled_skyline=False)),
    ("canonical_skyline=false (monotone order only)", dict(canonical_skyline=False)),
    ("hatless_pruning=false", dict(hatless_pruning=False)),
    ("section_inference=false", dict(section_inference=False)),
    ("decompose=false", dict(decompose=False)),
    ("canonical_restarts=false", dict(canonical_restarts=False)),
    ("dominance=false", dict(dominance=False)),
    ("valley_inference=false", dict(valley_inference=False)),
    ("coalesce_handovers=false", dict(coalesce_handovers=False)),
    ("coalesce_stacks=false", dict(coalesce_stacks=False)),
    ("coalesce_partners=false", dict(coalesce_partners=False)),
    ("partner_quiet_events=false", dict(partner_quiet_events=False)),
    ("partner_nogoods=false", dict(partner_nogoods=False)),
    ("equal_turns=false", dict(equal_turns=False)),
    ("eager_refolds=false", dict(eager_refolds=False)),
    ("portfolio=false", dict(portfolio=False)),
    ("time_mirror=false", dict(time_mirror=False)),
    ("lns_repair=true", dict(lns_repair=True)),
    ("join_lns=true", dict(join_lns=True)),
]


def run_set(files, cfg, verbose=True):
    rows = []
    for f in files:
        p, _ = load(f)
        sol = solve(p, cfg)
        ok = sol.status != PLACED or not validate(p, sol.addr)
        assert ok, f"{f}: INVALID placement from {sol.method}"
        rows.append(dict(case=f.name, n=len(p), status=sol.status, s=sol.seconds, nodes=sol.nodes,
                         method=sol.method))
        if verbose:
            print(f"  {f.name}: {sol.status} {sol.seconds:.2f} s {sol.method}", flush=True)
    s = np.array([r["s"] for r in rows])
    return dict(cases=len(rows), placed=sum(r["status"] == PLACED for r in rows),
                infeasible=sum(r["status"] == INFEASIBLE for r in rows),
                median_s=float(np.median(s)), max_s=float(s.max()), rows=rows)


def run_wall(files, extra=()):
    """Each case as a user runs it: `python -m compiler.place solve FILE` in a fresh
    interpreter, wall seconds including start-up (and the kernels' loading, which
    the CLI never counts against the time limit). The CLI prints `placed` only
    for a placement its independent validator accepted."""
    rows = []
    for f in files:
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "compiler.place", "solve", str(f), *extra],
                           cwd=HERE.parents[1], capture_output=True, text=True)
        w = time.perf_counter() - t
        line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr.strip()
        assert "INTERNAL ERROR" not in r.stdout and r.returncode in (0, 1), f"{f}: {line}"
        words = line.split()
        status = words[1] if len(words) > 1 else "error"
        method = next((x[7:] for x in words if x.startswith("method=")), "")
        rows.append(dict(case=f.name, status=status, wall_s=w, method=method))
        print(f"  {f.name}: {status} {w:.2f} s wall {method}", flush=True)
    s = np.array([r["wall_s"] for r in rows])
    return dict(cases=len(rows), placed=sum(r["status"] == PLACED for r in rows),
                median_wall_s=float(np.median(s)), max_wall_s=float(s.max()),
                load=os.getloadavg(), rows=rows)


def _corpus(names):
    """The sets `names`: an extra seed's set is generated only when asked for (a
    held-out list is never generated, let alone looked at, before its run)."""
    root = HERE / "cases"
    if not (root / "hard").exists():
        import generate
        generate.main(["--out", str(root)])
    out = {k: cases([root / k]) for k in SETS}
    for name in EXTRA:
        if name not in names:
            continue
        d = root / name
        if not (d / "hard").exists():
            import generate
            generate.hard(d, int(name.split("-")[1]))
        out[name] = cases([d / "hard"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=["default", "wall", "ablation", "table"])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--only", default="", help="default/wall: comma-separated case name "
                    "prefixes within the sets (a subset; the JSON says which)")
    ap.add_argument("--limit", type=float, default=10.0, help="ablation: seconds per case")
    ap.add_argument("--rows", default="", help="ablation: comma-separated row name prefixes "
                    "(default: all); rows not run keep their earlier figures in the JSON")
    ap.add_argument("--on", default="", help="ablation: these sets (with --only, those "
                    "cases) instead of the hard subset and zero-slack; needs --rows")
    a = ap.parse_args(argv)
    if a.part == "table":
        return table()
    sets = _corpus(set(a.sets.split(",")) | set(a.on.split(",")))
    if a.only:
        pre = tuple(a.only.split(","))
        sets = {k: [f for f in v if f.name.startswith(pre)] for k, v in sets.items()}
    if a.part == "wall":   # per set: placed, median and max wall including start-up
        res = HERE / "results-wall.json"
        out = json.loads(res.read_text()) if res.exists() else {}
        for k in a.sets.split(","):
            print(k, flush=True)
            out[k + (f" (only {a.only})" if a.only else "")] = run_wall(sets[k])
            res.write_text(json.dumps(out, indent=1) + "\n")
        return
    t = time.perf_counter()
    from compiler.place.skyline_jit import warm
    warm()
    print(f"kernels loaded/compiled in {time.perf_counter() - t:.1f} s (not counted)", flush=True)
    out = {}
    if a.part == "default":
        cfg = PlaceConfig.from_dict(CLI_DEFAULTS)
        for k in a.sets.split(","):
            print(k, flush=True)
            out[k] = run_set(sets[k], cfg)
            json.dump(out, open(HERE / f"results-default-{a.sets.replace(',', '-')}"
                                f"{'-only' if a.only else ''}.json", "w"),
                      indent=1)
    elif a.on:     # ablation rows on other sets (--only to pick cases): its own JSON
        files = {k: sets[k] for k in a.on.split(",")}
        ab = HERE / f"results-ablation-{a.on.replace(',', '-')}{'-only' if a.only else ''}.json"
        out = json.loads(ab.read_text()) if ab.exists() else {}
        for name, ov in ABLATE:
            if not any(name.startswith(r) for r in a.rows.split(",")):
                continue
            cfg = PlaceConfig.from_dict({**CLI_DEFAULTS, "time_limit_s": a.limit, **ov})
            out[name] = {k: run_set(fs, cfg) for k, fs in files.items()}
            print(name, {k: v["placed"] for k, v in out[name].items()}, flush=True)
            json.dump(out, open(ab, "w"), indent=1)
    else:
        files = {"hard (12 of 36)": sets["hard"][::3], "zeroslack": sets["zeroslack"]}
        ab = HERE / "results-ablation.json"
        out = json.loads(ab.read_text()) if a.rows and ab.exists() else {}
        rows = [r for r in a.rows.split(",") if r]
        for name, ov in ABLATE:
            if rows and not any(name.startswith(r) for r in rows):
                continue
            cfg = PlaceConfig.from_dict({**CLI_DEFAULTS, "time_limit_s": a.limit, **ov})
            out[name] = {k: run_set(fs, cfg) for k, fs in files.items()}
            print(name, {k: v["placed"] for k, v in out[name].items()}, flush=True)
            json.dump(out, open(ab, "w"), indent=1)


def table():
    md = []
    d = {}
    for f in sorted(HERE.glob("results-default-*.json")):
        d.update(json.loads(f.read_text()))
    md += ["| set (default settings) | cases | placed | median s | max s | before: placed | before: median s | before: max s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    before = HERE / "before-74c8e47.json"
    b = json.loads(before.read_text()) if before.exists() else {}
    for k in SETS:
        if k not in d:
            continue
        r = d[k]
        bs = " | | |"
        if k in b:
            x = b[k]
            bs = f" {x['placed']}/{x['cases']} | {x['median_s']:.3f} | {x['max_s']:.3f} |"
        md.append(f"| {k} | {r['cases']} | {r['placed']}/{r['cases']} | {r['median_s']:.3f} | "
                  f"{r['max_s']:.3f} |" + bs)
    md.append("")
    fails = [f"{k}: " + ", ".join(x["case"] for x in d[k]["rows"] if x["status"] != PLACED)
             for k in d if d[k]["placed"] < d[k]["cases"]]
    md.append("Not placed with default settings: " + ("; ".join(fails) or "none") + ".")
    wall = HERE / "results-wall.json"
    if wall.exists():
        md += ["", "| set (CLI, one fresh process per case) | placed | median s wall | max s wall "
               "| not placed | load (15 min) |", "|---|---:|---:|---:|---|---:|"]
        for k, r in json.loads(wall.read_text()).items():
            miss = ", ".join(x["case"].rsplit("-", 1)[0] for x in r["rows"] if x["status"] != PLACED)
            md.append(f"| {k} | {r['placed']}/{r['cases']} | {r['median_wall_s']:.2f} | "
                      f"{r['max_wall_s']:.2f} | {miss or '-'} | {r['load'][2]:.1f} |")
    ab = HERE / "results-ablation.json"
    if ab.exists():
        a = json.loads(ab.read_text())
        md += ["", "| ablation (10 s per case) | hard subset placed | median s | zero-slack placed | median s |",
               "|---|---:|---:|---:|---:|"]
        for name, r in a.items():
            h, z = r["hard (12 of 36)"], r["zeroslack"]
            md.append(f"| {name} | {h['placed']}/{h['cases']} | {h['median_s']:.2f} | "
                      f"{z['placed']}/{z['cases']} | {z['median_s']:.2f} |")
    (HERE / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

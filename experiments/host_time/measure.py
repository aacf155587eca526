"""Host time and peak RSS of every stage of a trial, from an empty store, for commits
side by side: `python experiments/host_time/measure.py [--layers 27] REV [REV ...]`.

For each revision: an exported copy (git archive) in a temporary directory, params.yaml
composed by that revision with `model.layers` overridden and a fresh store, then
`python -m pipeline <phase>` for every phase in order -- exactly what
`dvc exp run -S model.layers=N` runs, without DVC's own bookkeeping. Per stage: the
stage's own host monitor figures (artifacts/<phase>/host-time.json: elapsed seconds
inside the stage and peak RSS of its process tree), the wall time of the whole
process (imports and artifact loading included) and the 1-minute load average
before it started (the machine is shared: say how busy it was). Prints a markdown
table; the copies are removed afterwards.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


# `python -m pipeline <phase>`, then the process's peak RSS as the kernel counts it (VmHWM:
# every page ever resident at once, however briefly; the stage's own monitor samples every
# 0.5 s and can miss a short peak)
STAGE = """import resource, runpy, sys
sys.argv = ["pipeline", sys.argv[1]]
try:
    runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
finally:
    print(f"TESSERA_MAXRSS_KIB={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
"""


def phases_of(tree: Path, env: dict) -> list[str]:
    """The revision's own stage order (a later revision may add stages, e.g. `reference`)."""
    out = subprocess.run([sys.executable, "-c", "from compiler.phases import PHASES; print(*PHASES)"],
                         cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
    return out.split()


def host_figures(tree: Path, phase: str) -> dict:
    """The stage's own monitor: metrics/host/<phase>.json (artifacts/host/<phase>/host-time.json
    holds the same; older revisions wrote artifacts/<phase>/host-time.json)."""
    for f in (tree / "metrics" / "host" / f"{phase}.json", tree / "artifacts" / "host" / phase / "host-time.json",
              tree / "artifacts" / phase / "host-time.json"):
        if f.is_file():
            return json.loads(f.read_text())
    raise FileNotFoundError(f"no host figures for {phase} under {tree}")


def sh(*cmd, cwd=REPO, env=None):
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def measure(rev: str, layers: int, work: Path, keep: Path | None = None, leave: bool = False) -> dict:
    sha = sh("git", "rev-parse", "--short", rev).strip()
    tree = work / f"tree-{sha}"
    tree.mkdir(parents=True)
    # an exported copy, not a git worktree: nothing is registered in the shared repository
    subprocess.run(f"git archive {sha} | tar -x -C {tree}", shell=True, cwd=REPO, check=True)
    try:
        env = dict(os.environ, PYTHONPATH=str(tree), DVC_NO_ANALYTICS="1")
        py = sys.executable
        subprocess.run([py, "-m", "pipeline.config", "write"], cwd=tree, env=env, check=True,
                       capture_output=True)
        params = yaml.safe_load((tree / "params.yaml").read_text())
        params["model"]["layers"] = layers
        params["store"] = str(work / f"store-{sha}")             # empty: nothing reused
        (tree / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        rows = {}
        for phase in phases_of(tree, env):
            load = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            r = subprocess.run([py, "-c", STAGE, phase], cwd=tree, env=env, capture_output=True, text=True)
            wall, c1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
            # CPU seconds of the stage's process (user + system): what an idle machine's wall
            # time approaches for a single-threaded stage, whatever the load was
            cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
            if r.returncode:
                raise RuntimeError(f"{sha} {phase}: exit {r.returncode}\n{r.stderr[-2000:]}")
            host = host_figures(tree, phase)
            hwm = re.findall(r"TESSERA_MAXRSS_KIB=(\d+)", r.stderr)
            rows[phase] = dict(wall_s=round(wall, 1), cpu_s=round(cpu, 1), elapsed_s=round(host["elapsed_s"], 1),
                               hwm_mib=round(int(hwm[-1]) / 1024) if hwm else None,
                               peak_rss_mib=round(host["peak_rss_mib"]), load=round(load, 1))
            print(f"{sha} {phase}: {rows[phase]}", file=sys.stderr, flush=True)
        metrics = json.loads((tree / "metrics" / "run.json").read_text())
        trial = json.loads((tree / "metrics" / "trial.json").read_text())
        if keep:       # the profile, the metrics and the RSS samples, for a look afterwards
            for src in ("artifacts/report/profile.html", "metrics", "artifacts/host"):
                if (tree / src).exists():
                    dst = keep / sha / src
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copytree(tree / src, dst, dirs_exist_ok=True) if (tree / src).is_dir() \
                        else shutil.copy2(tree / src, dst)
        store = work / f"store-{sha}"
        return dict(rev=sha, stages=rows, status=trial.get("status"),
                    cycles_per_layer=metrics.get("run", {}).get("cycles_per_layer"),
                    store_mb=round(sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) / 1e6, 1))
    finally:
        if not leave:          # --work: the copy and its store stay, to rerun one stage in it
            shutil.rmtree(tree, ignore_errors=True)
            shutil.rmtree(work / f"store-{sha}", ignore_errors=True)


def table(results: list[dict]) -> str:
    cols = "s in stage / process | CPU s | peak MiB (sampled / kernel) | load"
    head = "| stage | " + " | ".join(f"{r['rev']}: " + cols.replace(" | ", f" | {r['rev']}: ") for r in results) + " |"
    sep = "|---|" + "---:|---:|---:|---:|" * len(results)
    lines = [head, sep]
    phases = list(dict.fromkeys(p for r in results for p in r["stages"]))
    for p in phases:
        cells = []
        for r in results:
            s = r["stages"].get(p)
            if s is None:          # a stage this revision does not have
                cells += ["-"] * 4
                continue
            hwm = s.get("hwm_mib")
            cells += [f"{s['elapsed_s']} / {s['wall_s']}", str(s.get("cpu_s", "-")),
                      f"{s['peak_rss_mib']:,} / {hwm:,}" if hwm else f"{s['peak_rss_mib']:,}", f"{s['load']}"]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    tot = []
    for r in results:
        st = r["stages"].values()
        cpu = [s["cpu_s"] for s in st if "cpu_s" in s]
        tot += [f"{sum(s['elapsed_s'] for s in st):.1f} / {sum(s['wall_s'] for s in st):.1f}",
                f"{sum(cpu):.1f}" if cpu else "-",
                f"{max(s['peak_rss_mib'] for s in st):,}" + (f" / {max(s['hwm_mib'] for s in st):,}"
                                                             if all(s.get("hwm_mib") for s in st) else ""), ""]
    lines.append("| **all** | " + " | ".join(tot) + " |")
    lines.append("")
    lines += [f"{r['rev']}: status {r['status']}, {r['cycles_per_layer']:,} cycles per layer, "
              f"{r['store_mb']:,} MB left in its store" for r in results]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+")
    ap.add_argument("--layers", type=int, default=27)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--keep", help="copy each revision's profile.html, metrics/ and RSS samples under DIR/<rev>/")
    ap.add_argument("--work", help="export into DIR/tree-<rev> and leave it there (artifacts and store), "
                                   "so one stage can be rerun in it afterwards")
    a = ap.parse_args(argv)
    keep = Path(a.keep) if a.keep else None
    if a.work:
        Path(a.work).mkdir(parents=True, exist_ok=True)
        results = [measure(rev, a.layers, Path(a.work), keep, leave=True) for rev in a.revs]
    else:
        with tempfile.TemporaryDirectory(prefix="host_time-") as d:
            results = [measure(rev, a.layers, Path(d), keep) for rev in a.revs]
    print(f"model.layers={a.layers}; {os.cpu_count()} cores\n")
    print(table(results))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

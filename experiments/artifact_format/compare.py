"""Artifacts before/after the data-only format: the default trial's stages run from two
checkouts side by side -- `--before REV` (pickled result.pkl, cloudpickle store entries)
and this working tree (result.npz, pipeline/codec.py) -- alternating, each from an empty
store, `--rounds` times. Per stage: wall seconds of `python -m pipeline <phase>` (start-up,
loading the inputs, the phase, writing the result), host.<phase>.elapsed_s and peak RSS, the
artifact's bytes, and the bytes of its store entries.

    python experiments/artifact_format/compare.py --before 56f5a2e [--rounds 2] [-S model.layers=1 ...]

Results: results.json next to this file (medians over the rounds)."""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PHASES = ["model", "plan", "expand", "place", "schedule", "lower", "run", "report"]
COPY = ["compiler", "pipeline", "conf", "dvc.yaml", "params.yaml", "pyproject.toml"]


def checkout(rev: str | None, dst: Path) -> Path:
    dst.mkdir(parents=True)
    if rev:
        tar = subprocess.run(["git", "archive", rev, *COPY], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dst)], input=tar, check=True)
    else:
        for name in COPY:
            src = REPO / name
            (shutil.copytree if src.is_dir() else shutil.copy)(src, dst / name)
    return dst


def set_params(d: Path, overrides: list[str]) -> None:
    p = yaml.safe_load((d / "params.yaml").read_text())
    for o in overrides:
        k, _, v = o.partition("=")
        node = p
        *path, last = k.split(".")
        for part in path:
            node = node[part]
        node[last] = yaml.safe_load(v)
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def pickled(blob: bytes) -> bool:
    """The file, or a zip member in it (store entries: after the 52-byte header), starts like a pickle."""
    off = 52 if blob[:8] == b"TSRSTORE" else 0
    if blob[off:off + 1] == b"\x80":
        return True
    if blob[off:off + 2] != b"PK":
        return False
    with zipfile.ZipFile(io.BytesIO(blob[off:])) as zf:
        return any(pickled(zf.read(n)) for n in zf.namelist())


def trial(d: Path) -> dict:
    shutil.rmtree(d / ".tessera-store", ignore_errors=True)
    shutil.rmtree(d / "artifacts", ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(d), DVC_NO_ANALYTICS="1")
    out = {}
    for ph in PHASES:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pipeline", ph], cwd=d, env=env, check=True, capture_output=True)
        wall = time.perf_counter() - t0
        host = json.loads((d / "artifacts" / ph / "host-time.json").read_text())
        res = [f for f in (d / "artifacts" / ph).glob("result.*")]
        out[ph] = {"wall_s": wall, "elapsed_s": host["elapsed_s"], "peak_rss_mib": host["peak_rss_mib"],
                   "artifact_bytes": res[0].stat().st_size if res else 0}
    store = d / ".tessera-store"
    files = [f for r in (d / "artifacts", store) for f in r.rglob("*") if f.is_file()]
    out["files"], out["pickles"] = len(files), sum(pickled(f.read_bytes()) for f in files)
    out["store_bytes"] = sum(f.stat().st_size for f in store.rglob("*.tsr"))
    out["store_entries"] = sum(1 for _ in store.rglob("*.tsr"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="git revision with pickled artifacts")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-S", action="append", default=[], help="params override key=value (both sides)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tessera-artifact-format-"))
    try:
        sides = {"before": checkout(a.before, tmp / "before"), "after": checkout(None, tmp / "after")}
        for d in sides.values():
            set_params(d, a.S)
        runs = {s: [] for s in sides}
        for r in range(a.rounds):
            for s, d in sides.items():                      # alternate: both see the same machine load
                runs[s].append(trial(d))
                print(f"round {r + 1} {s}: " + ", ".join(f"{ph} {runs[s][-1][ph]['wall_s']:.1f}s" for ph in PHASES),
                      file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {s: {ph: {k: statistics.median(run[ph][k] for run in rs) for k in rs[0][ph]} for ph in PHASES}
           | {k: rs[0][k] for k in ("store_bytes", "store_entries", "files", "pickles")} for s, rs in runs.items()}
    result = {"before": a.before, "rounds": a.rounds, "overrides": a.S, "median": med, "runs": runs}
    (HERE / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    b, f = med["before"], med["after"]
    print("| stage | artifact MB before → after | wall s before → after | host elapsed s before → after | peak MiB before → after |")
    print("|---|---:|---:|---:|---:|")
    for ph in PHASES:
        x, y = b[ph], f[ph]
        print(f"| {ph} | {x['artifact_bytes'] / 1e6:.1f} → {y['artifact_bytes'] / 1e6:.1f} | "
              f"{x['wall_s']:.1f} → {y['wall_s']:.1f} | {x['elapsed_s']:.2f} → {y['elapsed_s']:.2f} | "
              f"{x['peak_rss_mib']:.0f} → {y['peak_rss_mib']:.0f} |")
    tot = lambda m, k: sum(m[ph][k] for ph in PHASES)
    print(f"| total | {tot(b, 'artifact_bytes') / 1e6:.1f} → {tot(f, 'artifact_bytes') / 1e6:.1f} | "
          f"{tot(b, 'wall_s'):.1f} → {tot(f, 'wall_s'):.1f} | {tot(b, 'elapsed_s'):.2f} → {tot(f, 'elapsed_s'):.2f} | |")
    print(f"store: {b['store_entries']} entries {b['store_bytes'] / 1e6:.1f} MB → "
          f"{f['store_entries']} entries {f['store_bytes'] / 1e6:.1f} MB")
    print(f"files under artifacts/ and the store that are (or hold) pickles: {b['pickles']}/{b['files']} → "
          f"{f['pickles']}/{f['files']}")


if __name__ == "__main__":
    main()

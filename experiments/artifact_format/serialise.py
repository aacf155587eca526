"""The artifacts' save and load times, pickle vs the data-only format, on the same result
objects: every phase of a trial in-process once (default config unless overridden), then per
phase, alternating, `--reps` times: pickle dumps + write / read + unpickle (what the stages
did before) and codec.dumps + write / codec.load (what they do now). Isolates the format's cost
from the phases' compute, which on a shared machine varies more than the format costs.
The "before" load unpickles the bytes this process just made, in memory (never bytes read back
from disk; the file is read only to time the read).

    python experiments/artifact_format/serialise.py [--reps 3] [key=value ...]

Results: serialise.json next to this file."""
from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from compiler.phases import compile_trial  # noqa: E402
from pipeline import codec  # noqa: E402
from pipeline.config import compose  # noqa: E402
from pipeline.stages import write_atomic  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    cfg = compose(a.overrides)
    t, res = timed(lambda: compile_trial(cfg))
    print(f"trial compiled in-process in {t:.1f}s", file=sys.stderr)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ph, r in res.items():
            if ph == "report":          # the report stage writes html/csv, no result artifact
                continue
            m = {k: [] for k in ("pickle_save", "pickle_load", "codec_save", "codec_load")}
            pk, npz = Path(tmp) / f"{ph}.pkl", Path(tmp) / f"{ph}.npz"
            for _ in range(a.reps):
                blob = pickle.dumps(r, protocol=4)
                m["pickle_save"].append(timed(lambda: write_atomic(pk, pickle.dumps(r, protocol=4)))[0])
                m["codec_save"].append(timed(lambda: write_atomic(npz, codec.dumps(r)))[0])
                read = timed(lambda: pk.read_bytes())[0]
                m["pickle_load"].append(read + timed(lambda: pickle.loads(blob))[0])   # in memory, ours
                m["codec_load"].append(timed(lambda: codec.load(npz))[0])
            rows[ph] = {k: round(statistics.median(v), 3) for k, v in m.items()} | {
                "pickle_bytes": pk.stat().st_size, "codec_bytes": npz.stat().st_size}
            x = rows[ph]
            print(f"{ph}: {x['pickle_bytes'] / 1e6:.1f} -> {x['codec_bytes'] / 1e6:.1f} MB, save "
                  f"{x['pickle_save']:.3f} -> {x['codec_save']:.3f} s, load {x['pickle_load']:.3f} -> "
                  f"{x['codec_load']:.3f} s", file=sys.stderr)
    (HERE / "serialise.json").write_text(json.dumps({"overrides": a.overrides, "reps": a.reps, "phases": rows},
                                                    indent=1) + "\n")
    print("| artifact | MB pickle → npz | save s pickle → npz | load s pickle → npz |")
    print("|---|---:|---:|---:|")
    for ph, x in rows.items():
        print(f"| {ph} | {x['pickle_bytes'] / 1e6:.1f} → {x['codec_bytes'] / 1e6:.1f} | {x['pickle_save']:.2f} → "
              f"{x['codec_save']:.2f} | {x['pickle_load']:.2f} → {x['codec_load']:.2f} |")


if __name__ == "__main__":
    main()

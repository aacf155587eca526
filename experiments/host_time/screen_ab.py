"""Expand's resident screen (compiler/expand/__init__.py resident_over) off and on, side by side
in one process: `python experiments/host_time/screen_ab.py [--runs N] [overrides ...]` (default
the So400m tower at 27 layers on ipu21). Model and plan once; then the expand phase N times
each way, alternating, serially (no fan-out): CPU seconds, candidates screened, rejections, and
whether the finalists (labels and exact cycles) are the same."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import compiler.expand as ex  # noqa: E402
from compiler.phases import run_phase  # noqa: E402
from pipeline.config import compose  # noqa: E402


def main(argv: list[str]) -> None:
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 2
    over = [a for i, a in enumerate(argv) if a != "--runs" and (i == 0 or argv[i - 1] != "--runs")]
    cfg = compose(["model=vit", "target=ipu21", "model.layers=27", *over])
    r = {"model": run_phase("model", {}, cfg)}
    r["plan"] = run_phase("plan", r, cfg)
    real, cpu, sig = ex.resident_over, {}, {}
    for _ in range(runs):
        for name, screen in (("off", lambda *a: None), ("on", real)):
            ex.resident_over = screen
            c = time.process_time()
            e = run_phase("expand", r, cfg)
            cpu.setdefault(name, []).append(round(time.process_time() - c, 1))
            sig[name] = [(f.candidate.label, f.analysis["cycles"]) for f in e.finalists]
            print(f"screen {name}: {cpu[name][-1]} CPU s, {e.screened} candidates, rejected {e.rejected}", flush=True)
    ex.resident_over = real
    print(f"CPU s off {cpu['off']} on {cpu['on']}; the same finalists: {sig['off'] == sig['on']}")


if __name__ == "__main__":
    main(sys.argv[1:])

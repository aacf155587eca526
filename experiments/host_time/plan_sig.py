"""The plan phase's seconds and a signature of its whole result (sha256 of the PlanResult's
repr: every candidate, grid, estimate and rejection count) on eight configurations, so two
checkouts are compared for speed and for sameness:
`PYTHONPATH=CHECKOUT python experiments/host_time/plan_sig.py [FIRST LAST]` (the checkout on
PYTHONPATH decides which plan runs; FIRST LAST: a slice of the list below). Prints one line
per configuration: its overrides, the plan phase's wall seconds, the signature's first 16 hex
digits and the repr's length. Each configuration builds its model first (seconds; the FP8
batches calibrate, minutes)."""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))     # after PYTHONPATH's checkout
from compiler.phases import run_phase  # noqa: E402
from experiments.throughput.run import overrides  # noqa: E402
from pipeline.config import compose  # noqa: E402

CONFIGS = [["model.layers=27"], ["model.layers=4"],
           ["model.layers=27", "model.fp8_activations=true", "model.fp8_scales=bound"],
           overrides(6, "fp8", ["model.fp8_scales=bound"]), overrides(6, "f16", []),
           ["model.layers=8", "policy.weight_stationary=false"], ["model.preset=b16", "model.layers=12"],
           ["model.layers=4", "policy.ring_copies=3", "policy.ring_in_place=true"]]


def main(argv):
    first, last = (int(argv[0]), int(argv[1])) if len(argv) == 2 else (0, len(CONFIGS))
    for ov in CONFIGS[first:last]:
        cfg = compose(ov)
        res = {"model": run_phase("model", {}, cfg)}
        t = time.perf_counter()
        p = run_phase("plan", res, cfg)
        dt = time.perf_counter() - t
        s = repr(p)
        print(" ".join(ov), f"plan {dt:.1f}s", hashlib.sha256(s.encode()).hexdigest()[:16], len(s), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

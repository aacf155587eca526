"""The README's GEMMs through every phase in-process, each checked against the
independent cycle oracle (compiler/sim/oracle.py) superstep by superstep.

    python experiments/workloads/gemms.py [vit] > experiments/workloads/gemms.md

With `vit`, also the default ViT (so400m, 4 layers, ipu21): the oracle on a
full-size program."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import PHASES, run_phase  # noqa: E402
from compiler.sim import oracle  # noqa: E402
from pipeline.config import compose  # noqa: E402

TRIALS = {
    "32×64×64 f16, tiny": ["model=gemm", "target=tiny"],
    "512×1152×1152 f16, ipu21": ["model=gemm", "target=ipu21", "model.m=512", "model.k=1152", "model.n=1152"],
    "512×1152×1152 fp8, ipu21": ["model=gemm", "target=ipu21", "model.m=512", "model.k=1152", "model.n=1152",
                                 "model.dtype=fp8"],
}


def main(argv):
    trials = dict(TRIALS)
    if "vit" in argv:
        trials["ViT so400m 4 layers, ipu21 (default)"] = ["model=vit", "target=ipu21"]
    print("| trial | cycles | ms @ 1.5 GHz | max abs error / tolerance | oracle = simulator, every superstep "
          "| oracle s |\n|---|---:|---:|---|---|---:|")
    for name, ov in trials.items():
        cfg = compose(ov)
        res = {}
        for ph in PHASES:
            res[ph] = run_phase(ph, res, cfg)
        r = res["run"]
        t0 = time.perf_counter()
        o = oracle.step_cycles(res["lower"].program).tolist()
        secs = time.perf_counter() - t0
        same = "yes" if o == r.cycles_per_step else f"NO ({sum(o)} vs {r.cycles})"
        print(f"| {name} | {r.cycles:,} | {r.ms:.6f} | {r.max_abs_error:.2g} / {r.tolerance:.3g} | {same} "
              f"| {secs:.1f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Host CPU seconds of plan and expand with and without policy.attn_variants (the
variants are more candidates for expand to screen), twice each, process time (less
sensitive to a shared host's load than wall time).

    python experiments/attention/host_cpu.py [key=value ...]      e.g. model.layers=27"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import run_phase  # noqa: E402
from pipeline.config import compose  # noqa: E402

common = ["model=vit", "target=ipu21", *sys.argv[1:]]
res = {"model": run_phase("model", {}, compose(common))}
for rep in range(2):
    for v in (["policy.attn_variants=0"], []):
        cfg = compose(common + v)
        r = dict(res)
        t0 = time.process_time(); r["plan"] = run_phase("plan", r, cfg); t1 = time.process_time()
        r["expand"] = run_phase("expand", r, cfg); t2 = time.process_time()
        print(v or "default", "candidates", len(r["plan"].candidates), "plan cpu", round(t1 - t0, 1),
              "expand cpu", round(t2 - t1, 1), "body", r["expand"].finalists[0].analysis["body_cycles"], flush=True)

"""Host CPU seconds of plan and expand at 27 So400m layers, with and without
policy.ring_homes / policy.early_gathers, twice each (process time: less sensitive to a
shared host's load than wall time).   python experiments/comm/host_cpu.py"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import run_phase
from pipeline.config import compose
common = ["model=vit", "target=ipu21", "model.layers=27"]
res = {"model": run_phase("model", {}, compose(common))}
for rep in range(2):
    for v in (["policy.ring_homes=false", "policy.early_gathers=false"], []):
        cfg = compose(common + v)
        r = dict(res)
        t0 = time.process_time(); r["plan"] = run_phase("plan", r, cfg); t1 = time.process_time()
        r["expand"] = run_phase("expand", r, cfg); t2 = time.process_time()
        print(v or "default", "plan cpu", round(t1 - t0, 1), "expand cpu", round(t2 - t1, 1), flush=True)

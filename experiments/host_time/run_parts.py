"""The run phase (simulator and read-back checks) on one artifact set, with the CPU seconds
of the simulator's own thread in its parts:
`python experiments/host_time/run_parts.py ARTIFACTS [CHECK]`.

ARTIFACTS holds a trial's lower/, model/ and reference/ result.npz (a 27-layer `dvc exp run`'s
artifacts/); CHECK the read-back's iterations (run.check: last_iteration, params.yaml's default,
or all, sampled). Runs compiler.run.run (the run stage's work, without writing artifacts) with the
code on PYTHONPATH, so an earlier revision is measured from a worktree of it:
`PYTHONPATH=TREE python experiments/host_time/run_parts.py ARTIFACTS`. Prints one JSON line:
wall and process CPU seconds, the main thread's CPU seconds in program load, host_in, the
exchanges and the read-back callback (thread CPU: what a part costs the simulator's thread
whatever else runs on the machine; the read-back's checks and the kernels' slices run on
other threads), peak RSS, and what must not change (read-back checks, validation, cycles).
"""
from __future__ import annotations

import collections
import importlib
import json
import resource
import sys
import time

from compiler import run as crun
from compiler.target import Target
from kernel_profile import thread_timed   # this directory (sys.path[0] when run as a script)
from pipeline import codec


def main(art: str, check: str = "last_iteration") -> None:
    simrun = importlib.import_module("compiler.sim.run")
    cpu = collections.Counter()
    for name in ("load", "host_in", "exchange"):
        thread_timed(cpu, simrun, name)
    machine_run = simrun.Machine.run

    def run(self, streams, on_step=None):
        if on_step is not None:
            hook = on_step

            def on_step(*a):
                c = time.thread_time()
                hook(*a)
                cpu["on_step"] += time.thread_time() - c
        return machine_run(self, streams, on_step)
    simrun.Machine.run = run

    lo = codec.load(f"{art}/lower/result.npz")
    mo = codec.load(f"{art}/model/result.npz", 1 << 20)      # weights read when used, as the stage does
    ref = codec.load(f"{art}/reference/result.npz")
    t = Target.from_dict(dict(lo.program.target))
    t0, c0 = time.perf_counter(), time.process_time()
    r = crun.run(lo, mo, t, check=check, ref=ref)
    print(json.dumps(dict(wall_s=round(time.perf_counter() - t0, 1), cpu_s=round(time.process_time() - c0, 1),
                          **{f"{k}_cpu_s": round(v, 2) for k, v in cpu.items()},
                          peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                          ops_checked=r.readback["ops_checked"], validated=r.validated, cycles=r.cycles)))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])

"""The reference at checkpoints: the graph's outputs and every Repeat iteration's layer
output, each with the error the run may show there (issue #23; docs/architecture.md §7a).

Why every iteration. Read-back op by op (compiler/readback.py) is the sharpest check but
costs about the simulator's own arithmetic for every iteration it reads back
(experiments/readback_cost), so the default reads back one iteration that way. A fault that
hits another iteration only -- an exchange leaving stale bytes in layer 1, a corrupted
member of a weight sequence, a wrong per-layer scale word -- must still fail, and say where:
the run reads back each iteration's layer output (the Repeat's carried output: one
activation, a few MB at So400m) and holds it to the reference's value in that iteration.

The tolerance at a checkpoint: twice the largest difference, over real (unpadded) rows,
between the two evaluations the reference phase runs anyway -- f16-rounded (the device's
storage) and unrounded -- at that checkpoint: the rule reference.reference_and_tolerance
applies to the graph's outputs, applied per iteration, so layer i is held to the rounding
noise measured up to layer i rather than to the last layer's. The graph's outputs and
their tolerance are computed exactly as reference.reference_and_tolerance computes them
(this module calls its evaluation; it changes none of its arithmetic)."""
from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import numpy as np
from threadpoolctl import threadpool_limits

from . import reference
from .compare import real_rows
from .ir import Graph

MARGIN = 2.0     # reference.reference_and_tolerance's factor on the measured rounding difference


def _capture(g: Graph, got: dict, dtype):
    """evaluate's rewrite hook: before iteration i > 0 runs its first body op, the carried
    input holds iteration i-1's layer output."""
    first, _ = g.body()
    (out, inp), = g.repeat.carried[:1]

    def rewrite(j, op, i, env):
        if j == first and i > 0:
            got[i - 1] = np.asarray(env[inp], dtype)
        return op
    return rewrite


def reference_checkpoints(g: Graph, data: dict) -> tuple[dict, float, dict | None]:
    """(outputs, tolerance, layers): the reference's graph outputs (f16) and the max abs
    error allowed on any of them, as reference.reference_and_tolerance returns them; and,
    for a graph with a Repeat, layers = {"values": f16 [count, rows, cols], the layer output
    of every iteration, "tolerance": float64 [count]} (None without a Repeat)."""
    rep = g.repeat
    if rep is None or not rep.carried:
        out, tol = reference.reference_and_tolerance(g, data)
        return out, tol, None
    last = g.ops[-1]
    name = rep.carried[0][0]
    rounded, exact = {}, {}
    keep = {t.name for t in g.of_kind("output")} | set(last.inputs) | {name}
    # as reference_and_tolerance: the two evaluations on one thread each, BLAS single-threaded
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(2) as pool:
        shared = reference._Shared()
        fut = [pool.submit(reference.evaluate, g, data, r, keep, _capture(g, got, dt), shared)
               for r, got, dt in ((True, rounded, np.float16), (False, exact, np.float32))]
        wait(fut, return_when=FIRST_COMPLETED)
        threadpool_limits(2, user_api="blas")
        env, env_exact = fut[0].result(), fut[1].result()
    n = rep.count
    rounded[n - 1], exact[n - 1] = env[name].astype(np.float16), env_exact[name].astype(np.float32)
    worst = 0.0
    if last.kind == "matmul":
        a, b = (np.abs(env[x]) for x in last.inputs)
        worst = 3 * reference.F16_UNIT * float(reference.matmul(last, a, b).max())
    worst += MARGIN * max(float(np.abs(env[t.name] - env_exact[t.name]).max()) for t in g.of_kind("output"))
    keep_rows = real_rows(g, name)
    gap = [float(np.abs(rounded[i][keep_rows].astype(np.float64) - exact[i][keep_rows]).max(initial=0.0))
           for i in range(n)]
    layers = {"values": np.stack([rounded[i] for i in range(n)]), "tolerance": MARGIN * np.asarray(gap)}
    return reference.outputs(g, env), worst, layers

"""The synthetic benchmark program (compiler.sim.bench) on the tiny target,
checked end to end against numpy: matmul, ring exchange with reshaping,
ADD, COPY, host streams, cycle totals."""
import numpy as np

from compiler import exact
from compiler.sim import bench, run

from .asm import TINY


def test_synthetic_ring_against_numpy():
    m, k, n, rounds = 32, 256, 128, 2
    p, s = bench.synthetic_program(TINY, rounds, m, k, n)
    res = run(p, s)
    T = TINY.tiles
    a = np.broadcast_to(s["a"].view(np.float16).reshape(m, k), (T, m, k)).copy()
    b = s["b"].view(np.float16).reshape(T, k, n)
    for _ in range(rounds):
        # MATMUL's products summed exactly, rounded once to f32 (compiler/exact.py, held to a
        # brute-force exact sum by tests/test_exact.py): the same bits on every host's BLAS
        out = (exact.matmul_f32(a.astype(np.float32), b.astype(np.float32)) * np.float32(1 / 16)).astype(np.float16)
        recv = np.roll(out, 1, axis=0)            # tile t receives from t-1
        summed = (out.astype(np.float32) + recv.astype(np.float32)).astype(np.float16)
        a.reshape(T, -1)[:, :m * n] = summed.reshape(T, -1)
    got = res.outputs["out"].view(np.float16).reshape(T, m, n)
    assert np.array_equal(got, out)
    assert res.step_kind == ["compute", "exchange", "compute"] * rounds
    assert res.total_cycles == res.step_cycles.sum() and res.exchange_bytes.sum() == rounds * T * m * n * 2


def test_repeat_benchmark_program_runs_on_tiny():
    """The REPEAT benchmark (every new kernel, relocated weights) on the tiny target:
    finite results, 6 supersteps per iteration, loop-invariant step shapes."""
    iters = 3
    p, s = bench.repeat_program(TINY, iters)
    res = run(p, s)
    out = res.outputs["out"].view(np.float16)
    assert np.isfinite(out).all() and out.any()
    kinds = ["compute", "exchange", "compute", "compute", "compute", "compute"]
    assert res.step_kind == kinds * iters + ["compute"]
    c = res.step_cycles[:-1].reshape(iters, 6)
    assert (c == c[0]).all()

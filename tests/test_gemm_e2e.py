"""Differential tests: GEMMs compiled through every phase and executed on the
simulator, compared with the numpy reference; and the simulator's measured cycles
held to the expand-time analysis (both apply target.py to the same program)."""
import numpy as np
import pytest

from compiler.phases import compile_trial
from helpers import cfg

rng = np.random.default_rng(20261129)
SHAPES = []
for i in range(24):
    dtype = ["f16", "fp8"][i % 2]
    w = 4 if dtype == "fp8" else 2
    m, k, n = int(rng.integers(1, 80)), w * int(rng.integers(1, 48)), w * int(rng.integers(1, 48))
    grid = ""
    if i % 3 == 0:   # force a k-split so partial-sum reduction is exercised
        grid = f"{int(rng.integers(1, 3))}x{int(rng.integers(1, 3))}x{int(rng.integers(2, 5))}"
    SHAPES.append((m, k, n, dtype, grid, i))


@pytest.mark.parametrize("m,k,n,dtype,grid,seed", SHAPES)
def test_random_gemm_validates(m, k, n, dtype, grid, seed):
    r = compile_trial(cfg(m=m, k=k, n=n, dtype=dtype, seed=seed, policy={"grid": grid}))
    if grid and r["plan"].rejection:        # a forced grid may not exist for tiny dims
        assert r["plan"].rejection.reason == "grid"
        pytest.skip(r["plan"].rejection.message)
    assert r["report"].summary["status"] == "ok", r["report"].summary
    run = r["run"]
    assert run.validated and run.max_abs_error <= run.tolerance
    # cycles: the simulator measured what expand predicted, superstep by superstep
    a = r["place"].tilegraph.analysis
    assert run.cycles_per_step == [int(c) for c in a["step_cycles"]]
    assert run.cycles == a["cycles"]


def test_k_split_reduction_runs_four_supersteps():
    r = compile_trial(cfg(m=40, k=128, n=72, dtype="fp8", policy={"grid": "2x2x4"}))
    assert r["run"].validated
    assert r["run"].step_kind == ["exchange", "compute", "exchange", "compute"]


def test_same_config_same_bytes():
    from pipeline import codec
    a = compile_trial(cfg(m=24, k=64, n=40, dtype="fp8", policy={"grid": "2x2x2"}))
    b = compile_trial(cfg(m=24, k=64, n=40, dtype="fp8", policy={"grid": "2x2x2"}))
    pa, pb = a["lower"].program, b["lower"].program
    assert pa.code.tobytes() == pb.code.tobytes() and pa.table.tobytes() == pb.table.tobytes()
    assert codec.dumps(a["place"]) == codec.dumps(b["place"])


def test_too_large_is_rejected_with_deficit():
    r = compile_trial(cfg(m=2048, k=2048, n=2048))
    s = r["report"].summary
    assert s["status"] == "rejected"
    rej = s["rejected"]
    assert rej["phase"] == "plan" and rej["reason"] == "memory"
    assert rej["deficit_bytes"] > 0 and rej["live_bytes"] - rej["available_bytes"] == rej["deficit_bytes"]
    assert r["run"].rejection is r["plan"].rejection        # passed through, nothing ran


def test_exchange_table_cap_rejects_in_expand():
    r = compile_trial(cfg(m=64, k=256, n=256, policy={"exchange_table_cap": 64}))
    rej = r["report"].summary["rejected"]
    assert rej["phase"] == "expand" and rej["reason"] == "exchange_table_cap"
    assert rej["available_bytes"] == 64 and rej["deficit_bytes"] == rej["live_bytes"] - 64


@pytest.mark.parametrize("bad,key", [({"m": 0}, "model.m"), ({"n": 7}, "model.n"), ({"dtype": "int4"}, "model.dtype"),
                                     ({"bogus": 1}, "model.bogus")])
def test_bad_model_config_names_the_key(bad, key):
    from compiler.target import ConfigError
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        compile_trial(cfg(**bad))

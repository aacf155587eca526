"""Serial row passes (policy.serial_passes, grids "GMxGNxGK/SP"): a matmul's rows in SP
token blocks processed one after another on the same tiles, B gathered once. They
validate on the simulator with the cycles expand predicted, and they are how plan fits
a matmul whose one-pass working set does not fit."""
import pytest

from compiler.phases import compile_trial
from helpers import cfg, target_cfg, trial_ok

CASES = [(64, 64, 64, "f16", "4x4x2/2"), (75, 96, 40, "f16", "3x2x1/4"), (33, 128, 64, "fp8", "2x2x4/2"),
         (48, 64, 64, "fp8", "2x4x1/4")]


@pytest.mark.parametrize("m,k,n,dtype,grid", CASES)
@pytest.mark.parametrize("stationary", [False, True])
def test_forced_passes_validate(m, k, n, dtype, grid, stationary):
    r = compile_trial(cfg(m=m, k=k, n=n, dtype=dtype, policy={"grid": grid, "weight_stationary": stationary}))
    assert r["report"].summary["status"] == "ok", r["report"].summary
    assert r["place"].tilegraph.label.split()[0].rstrip("*").split("~")[0].endswith(grid)   # ~ring: its home
    run, a = r["run"], r["place"].tilegraph.analysis
    assert run.validated and run.max_abs_error <= run.tolerance
    assert run.cycles_per_step == [int(c) for c in a["step_cycles"]]
    passes = int(grid.split("/")[1])
    assert len(r["place"].tilegraph.steps) >= 2 * passes     # an exchange and a compute step per pass


@pytest.mark.parametrize("stationary", [False, True])
def test_repeat_mlp_with_passes_validates(stationary):
    """Passes inside a Repeat body: relocated weights (homes or resident) in every pass."""
    m = dict(name="mlp", tokens=16, width=16, hidden=32, repeat=3)
    r = compile_trial(dict(model=m, target=target_cfg("tiny"),
                           policy={"grid": "2x4x1/2", "weight_stationary": stationary}))
    assert r["report"].summary["status"] == "ok" and r["run"].validated, r["report"].summary


def test_passes_fit_what_one_pass_cannot():
    """2560 x 1024 x 64 f16 on the 64-tile target: no one-pass grid fits (plan proves
    it, with the deficit); with serial passes plan finds grids that place and validate."""
    shape = dict(m=2560, k=1024, n=64, dtype="f16")
    one = compile_trial(cfg(**shape, policy={"serial_passes": 1}))
    rej = one["report"].summary["rejected"]
    assert rej["phase"] == "plan" and rej["reason"] == "memory" and rej["deficit_bytes"] > 0
    r = compile_trial(cfg(**shape))
    assert r["report"].summary["status"] == "ok" and r["run"].validated, r["report"].summary
    assert "/" in r["place"].tilegraph.label


def test_alike_finalists_retry_another_shape():
    """policy.diverse_finalists: with broadcast sends the same GEMM's finalists (and the
    homes fallback) are all 8x2x4/2 twins, which expand's live-byte screen admits and
    placement proves infeasible (tile 0: 190,464 of 195,504 B, bank-separated from the
    resident weight). Expand then appends the best candidate of another grid shape,
    tried last, and it places. Ablated, the trial is rejected by placement."""
    from compiler.expand import grid_shape
    shape = dict(m=2560, k=1024, n=64, dtype="f16")
    r = compile_trial(cfg(**shape))
    fins = r["expand"].finalists
    shapes = [grid_shape(e.candidate) for e in fins]
    assert len(set(shapes[:-1])) == 1 and shapes[-1] != shapes[0]       # twins, then one other shape
    assert r["place"].placement.finalist == len(fins) - 1               # every twin failed placement
    assert r["place"].attempts[0]["failed"] > 0
    assert trial_ok(r), r["report"].summary
    off = compile_trial(cfg(**shape, policy={"diverse_finalists": False}))
    assert [grid_shape(e.candidate) for e in off["expand"].finalists] == shapes[:-1]
    assert off["report"].summary["rejected"]["phase"] == "place"

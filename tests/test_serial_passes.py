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


GEMM = dict(m=2560, k=1024, n=64, dtype="f16")


def test_passes_fit_what_one_pass_cannot():
    """2560 x 1024 x 64 f16 on the 64-tile target: no one-pass grid fits (plan proves
    it, with the deficit); with serial passes plan finds grids that place and validate."""
    one = compile_trial(cfg(**GEMM, policy={"serial_passes": 1}))
    rej = one["report"].summary["rejected"]
    assert rej["phase"] == "plan" and rej["reason"] == "memory" and rej["deficit_bytes"] > 0
    r = compile_trial(cfg(**GEMM))
    assert r["report"].summary["status"] == "ok" and r["run"].validated, r["report"].summary
    assert "/" in r["place"].tilegraph.label


def test_region1_screen_rejects_what_placement_cannot_place(monkeypatch):
    """The same GEMM forced to 8x2x4/2 (the cheapest grid by plan's estimate with broadcast
    sends): A's home and the A operand buffer, 80 KiB each, are live together, and a tiny
    tile's region 0 holds 64 KiB less its code and table, so both need region 1 (128 KiB):
    plan's region-1 screen rejects the grid (plan/matmul.py region1_live); with it off,
    expand rejects it for memory, and its figure is a brute-force recount's; placement,
    given the same tile graph, proves tile 0 infeasible by its region-1 bound. Before the
    screens counted such buffers, expand admitted every 8x2x4/2 twin and placement rejected
    the trial."""
    from compiler.plan import matmul as plan_matmul
    from compiler.expand.analysis import analyse, profile_bytes
    from compiler.expand.graph import expand_graph
    from compiler.phases import model_phase, place_config, policy_of, target_of
    from compiler.place.phase import reserve_support, tile_problems
    from compiler.place.problem import INFEASIBLE
    from compiler.place.solve import solve
    from compiler.plan import plan
    from compiler.target import INTERLEAVED, STANDARD
    c = cfg(**GEMM, policy={"grid": "8x2x4/2"})
    rej = compile_trial(c)["report"].summary["rejected"]
    assert rej["phase"] == "plan" and rej["reason"] == "grid", rej
    live = plan_matmul.region1_live
    monkeypatch.setattr(plan_matmul, "region1_live", lambda *a: live(*a) * 0)   # plan's region-1 screen off
    r = compile_trial(c)
    rej = r["report"].summary["rejected"]
    assert rej["phase"] == "expand" and rej["reason"] == "memory" and rej["deficit_bytes"] > 0, rej
    t, pol = target_of(c), policy_of(c)
    m = model_phase(c)
    cand = plan(m, t, pol).candidates[0]
    tg = expand_graph(m.graph, cand.grids, t, pol, cand.label, cand.resident)
    a = analyse(tg, t)
    req = tg.req
    for tile in (0, 63):          # brute force: every event, every request of the tile
        free0 = t.region0_end - t.memory_base - int(a["code_bytes"][tile]) - int(a["table_bytes"][tile])
        peak = 0
        for ev in range(int(req["end"].max()) + 1):
            live = 0
            for i in range(len(req["tile"])):
                if req["tile"][i] != tile or not req["start"][i] <= ev < req["end"][i]:
                    continue
                extent = int(req["stride"][i]) * (int(req["count"][i]) - 1) + int(req["size"][i])
                if req["region"][i] == INTERLEAVED or (req["region"][i] == STANDARD and extent > free0):
                    live += extent + int(req["align"][i]) - 1
            peak = max(peak, live)
        assert peak == a["region1_live_bytes"][tile] > a["region1_bytes"]
    tg.analysis = a
    problems, _ = tile_problems(tg, reserve_support(a, tg.tiles, profile_bytes(tg), t), t)
    sol = solve(problems[0], place_config(c))
    # proved by placement's own region-1 bound at once, not by exhausting a search (deficit 0)
    assert sol.status == INFEASIBLE and sol.method == "bound-live-region1" and sol.deficit > 0, sol


def test_alike_finalists_retry_another_shape(monkeypatch):
    """policy.diverse_finalists: the GEMM's finalists are 16x1x4/2 twins (resident, homes);
    if placement fails for that shape (injected), the best candidate of another shape,
    appended last, is placed. Ablated, the trial is rejected by placement."""
    from types import SimpleNamespace

    from compiler.expand import grid_shape
    from compiler.place import phase as place_phase
    real = place_phase.place_finalist

    def refuse(tg, *a, **k):
        support, addr, counts, worst, *rest = real(tg, *a, **k)
        if "16x1x4/2" in tg.label:                    # injected: a tile that did not fit
            worst = (0, SimpleNamespace(status="infeasible", live_bytes=1, event=0, available_bytes=0, deficit=1,
                                        request=-1, method="injected"))
        return support, addr, counts, worst, *rest

    monkeypatch.setattr(place_phase, "place_finalist", refuse)
    r = compile_trial(cfg(**GEMM))
    fins = r["expand"].finalists
    shapes = [grid_shape(e.candidate) for e in fins]
    assert len(fins) >= 3 and len(set(shapes[:-1])) == 1 and shapes[-1] != shapes[0]   # twins, then another
    assert r["place"].placement.finalist == len(fins) - 1
    assert trial_ok(r), r["report"].summary
    off = compile_trial(cfg(**GEMM, policy={"diverse_finalists": False}))
    assert [grid_shape(e.candidate) for e in off["expand"].finalists] == shapes[:-1]
    assert off["report"].summary["rejected"]["phase"] == "place"

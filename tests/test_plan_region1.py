"""Plan's region-1 screen (plan/matmul.py region1_live, #26) against expand's exact one
(expand/analysis.py region1_peak, counted from the tile graph): a grid plan rejects for
region 1 must be one every candidate of which expand rejects too, and a grid it keeps
must not be one expand rejects for region 1 alone when the term is that of a correct
screen (an over-counting term is caught)."""
from dataclasses import replace

import numpy as np
import pytest

from helpers import cfg

GEMM = dict(m=2560, k=1024, n=64, dtype="f16")


def _grids(monkeypatch=None, off=False):
    from compiler.phases import model_phase, policy_of, target_of
    from compiler.plan import matmul as mm
    from compiler.plan.homes import home_bytes
    c = cfg(**GEMM)
    t, pol, m = target_of(c), policy_of(c), model_phase(cfg(**GEMM))
    if off:
        live = mm.region1_live
        monkeypatch.setattr(mm, "region1_live", lambda *a: live(*a) * 0)
    e = mm.enumerate_grids(1, GEMM["m"], GEMM["k"], GEMM["n"], "f16", "f16", False, t,
                           home_bytes(m.graph, t, {}, pol.vector_homes), pol.passes, 0,
                           home_bytes(m.graph, t, {}, pol.vector_homes, over=t.region0_bytes))
    label = [f"{gm}x{gn}x{gk}" + (f"/{sp}" if sp > 1 else "")
             for gm, gn, gk, sp in zip(e["gm"], e["gn"], e["gk"], e["sp"])]
    return e, label


def _cheapest(e, label) -> str:
    """The admitted grid of least estimated cycles."""
    ok = np.flatnonzero(e["reason"] == "")
    return label[int(ok[np.argmin(e["cycles"][ok])])]


def _expand_region1_over(grid, monkeypatch):
    """Per candidate of the forced grid (plan's region-1 term off): does expand's exact
    screen find more region-1-only bytes than region 1 holds on some tile?"""
    from compiler.expand.analysis import analyse
    from compiler.expand.graph import expand_graph
    from compiler.phases import model_phase, policy_of, target_of
    from compiler.plan import matmul as mm
    from compiler.plan import plan
    c = cfg(**GEMM, policy={"grid": grid})
    t, pol, m = target_of(c), policy_of(c), model_phase(c)
    with monkeypatch.context() as mp:
        live = mm.region1_live
        mp.setattr(mm, "region1_live", lambda *a: live(*a) * 0)
        cands = plan(m, t, pol).candidates
    out = []
    for cand in cands:
        a = analyse(expand_graph(m.graph, cand.grids, t, pol, cand.label, cand.resident), t)
        out.append(bool((a["region1_live_bytes"] > a["region1_bytes"]).any()))
    return out


def test_region1_term_rejects_only_what_expand_rejects(monkeypatch):
    e, label = _grids()
    with monkeypatch.context() as mp:
        before, _ = _grids(mp, off=True)
    hit = sorted({label[i] for i in np.flatnonzero((before["reason"] == "") & (e["reason"] == "memory"))})
    assert len(hit) == 36 and "8x2x4/2" in hit, hit        # of 213 admitted without the term
    for grid in (hit[0], "8x2x4/2", hit[-1]):               # a sample: expanding all 36 takes ~20 s
        over = _expand_region1_over(grid, monkeypatch)
        assert over and all(over), (grid, over)
    kept = _cheapest(e, label)
    over = _expand_region1_over(kept, monkeypatch)
    assert over and not any(over), (kept, over)


@pytest.mark.parametrize("fault", ["threshold-half", "all-buffers"])
def test_an_overcounting_term_rejects_a_grid_expand_places(monkeypatch, fault):
    """Injected: counting buffers larger than half of region 0, or every buffer. The
    cheapest grid, which expand's screen admits, is then rejected: the check above
    (kept grids pass expand's region-1 screen) could not hold for such a term."""
    from compiler.plan import matmul as mm
    real = mm.region1_live

    def wrong(t, sp, home_r1, a, b, p, red, c):
        if fault == "all-buffers":
            return home_r1 + b + a + p + red + c
        half = replace(t, region0_end=t.memory_base + (t.region0_end - t.memory_base) // 2)
        return real(half, sp, home_r1, a, b, p, red, c)
    e, label = _grids()
    best = _cheapest(e, label)
    monkeypatch.setattr(mm, "region1_live", wrong)
    e2, label2 = _grids()
    assert best not in {label2[i] for i in np.flatnonzero(e2["reason"] == "")}, fault
    assert not any(_expand_region1_over(best, monkeypatch))

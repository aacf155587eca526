"""experiments/comm/amp.py: a matmul's AMP cycles cut into terms above its floor. The terms
add up to the cycles expand charged (the busiest tile's, as steps.py's split reads them),
each term is zero exactly when its cause is absent (hand-picked shapes), and a kernel
whose shape no longer gives expand's cycles is refused."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import isa
from compiler.expand.analysis import kernel_cycles
from compiler.phases import target_of
from helpers import target_cfg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from experiments.comm import amp  # noqa: E402

_spec = importlib.util.spec_from_file_location("comm_steps_amp", ROOT / "experiments" / "comm" / "steps.py")
steps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(steps)
from test_comm_steps import expanded  # noqa: E402


def test_terms_add_up_and_vanish_without_cause():
    t = target_of(dict(target=target_cfg("ipu21")))
    m = np.array([12, 13, 82, 12])
    k = np.array([32, 32, 74, 20])
    n = np.array([16, 16, 72, 16])
    tr = amp.kernel_terms(t, m, k, n, "f16", np.zeros(4, bool))
    parts = sum(tr[x] for x in ("useful", "k pad", "n pad", "ragged", "overhead", "cast"))
    assert np.allclose(parts, tr["total"])
    assert np.array_equal(tr["total"], t.matmul_cycles(m, k, n, "f16"))
    assert tr["ragged"][0] == 0 and tr["ragged"][1] > 0          # 12 rows: 2 a worker; 13: one has 3
    assert tr["k pad"][0] == 0 and tr["k pad"][3] == 12 * 12 * 16 / 64   # 20 -> 32 input channels
    assert tr["n pad"][2] == 82 * 80 * 8 / 64 and tr["passes"][2] == 25  # p.v's 72 -> 80 outputs
    assert (tr["cast"] > 0).all()
    assert (amp.kernel_terms(t, m, k, n, "f16", np.ones(4, bool))["cast"] == 0).all()   # F_F32_OUT
    assert (amp.kernel_terms(t, m, k, n, "fp8", np.zeros(4, bool))["cast"] == 0).all()  # QUARTER


def test_op_gaps_match_the_steps_split():
    g, e, t = expanded(dict(weight_stationary=False))
    out = steps.report(g, e, t, verbose=False, gaps=True)
    rows = out["amp"]
    assert {r["op"] for r in rows} == {o.outputs[0] for o in g.ops[slice(*g.body())] if o.kind == "matmul"}
    for r in rows:
        assert r["amp"] == out["split"][r["op"]]["amp"], r["op"]
        assert sum(r[x] for x in amp.TERMS) == pytest.approx(r["amp"])
    fr = amp.frontier(g, t, rows)
    assert all(f["same_recv"][1] <= f["amp"] for f in fr)   # the chosen grid is among those it compares


def test_a_kernel_not_costed_as_expand_charged_is_refused():
    g, e, t = expanded(dict(weight_stationary=False))
    tg = e.finalists[0].tilegraph
    kc = kernel_cycles(tg, t)
    mm = np.flatnonzero(tg.kern["op"] == isa.MATMUL)
    tg.kern["i0"][mm] += 7                                   # shapes that no longer give kc
    with pytest.raises(AssertionError, match="expand's cycles"):
        amp.op_gaps(g, tg, t, kc)


def test_swapped_replaces_only_the_named_grid():
    from compiler.phases import run_phase
    from test_comm_steps import VIT
    cfg = dict(model=VIT, target=target_cfg("tiny"), policy=dict(weight_stationary=False))
    r = {"model": run_phase("model", {}, cfg)}
    g, t = r["model"].graph, target_of(cfg)
    plan = run_phase("plan", r, cfg)
    best = plan.candidates[0]
    assert amp.swapped(plan, g, t, {}).candidates == [best]
    n, grid = next((n, gr) for n, gr in best.strategy if g.ops[n].outputs[0] == "attn")
    e, lab, cyc = amp.plain_grids(g, t, g.ops[n])
    other = next(x for x in lab if x != f"{grid.gg}x{grid.gm}x{grid.gn}x{grid.gk}")
    new = amp.swapped(plan, g, t, {"attn": other}).candidates[0]
    changed = [(m, gr) for (m, gr), (_, old) in zip(new.strategy, best.strategy) if gr != old]
    assert len(changed) == 1 and changed[0][0] == n
    gr = changed[0][1]
    assert f"{gr.gg}x{gr.gm}x{gr.gn}x{gr.gk}" == other and not gr.ring
    with pytest.raises(SystemExit):
        amp.swapped(plan, g, t, {"attn": "999x1x1x1"})

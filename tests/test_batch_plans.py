"""Batch plans (issue #27): a batch of B images is one graph whose matmuls have B·T rows and
whose weights are read once per run for all B images; what lets a batch fit beside a deep
model's weights is plan's memory screen seeing those weights (every member of a Repeat
sequence's home) and the lean candidates (policy.lean_candidates) leaving the support
expand adds. Checked here against expand's own tile graph (the requests it places), which
shares no code with plan's estimate."""
import numpy as np

from compiler.expand.graph import expand_graph
from compiler.phases import compile_trial, policy_of, run_phase, target_of
from compiler.plan.homes import home_bytes, panel_weights
from helpers import target_cfg

TOWER = dict(name="vit", preset="custom", scope="tower", width=256, hidden=1024, heads=2, image=112, patch=14,
             pool="map", input="")


def _cfg(policy=None, **model):
    return dict(model=dict(TOWER, **model), target=target_cfg("tiny"), policy=dict(policy or {}))


def test_home_bytes_bound_every_member_of_a_sequence():
    """plan's home bytes bound what expand's homes hold on the fullest tile, at 1 and at 3
    layers (counting one member per sequence, as plan did, the 3-layer figure falls below
    expand's by about two layers' weights)."""
    for layers in (1, 3):
        cfg = _cfg(dict(weight_stationary=False), layers=layers, width=128, hidden=512)
        res = {}
        for ph in ("model", "plan"):
            res[ph] = run_phase(ph, res, cfg)
        g, t, pol = res["model"].graph, target_of(cfg), policy_of(cfg)
        cand = res["plan"].candidates[0]
        tg = expand_graph(g, cand.grids, t, pol, cand.label, cand.resident)
        r = tg.req
        names = np.asarray(tg.names)[r["name"]].astype(str)
        home = np.char.endswith(names, ".home") | (names == "weights.ring")     # ring pieces read in place: pooled
        span = r["stride"] * (r["count"] - 1) + r["size"]
        held = np.bincount(r["tile"][home], span[home], minlength=t.tiles).max()
        est = home_bytes(g, t, panel_weights(g, t), pol.vector_homes)
        assert held <= est <= 2 * held, (layers, held, est)


def test_lean_candidates_fit_a_batch_that_would_not():
    """8 layers in homes and a batch of 4 images on the tiny target: every candidate of the
    plan without lean candidates is rejected by expand for memory; with them (the default)
    the trial fits, runs and validates, and its lean candidates leave the reserve."""
    model = dict(layers=8, batch=4)     # 7 fit without lean candidates once vector homes are balanced (policy.balanced_homes)
    # sends charged per receiver: the plans this case was sized on (broadcast sends choose
    # other grids, and the case no longer shows what it tests)
    pol = dict(weight_stationary=False, broadcast_sends=False)
    off = compile_trial(_cfg(dict(pol, lean_candidates=False), **model))
    assert off["expand"].rejection and off["expand"].rejection.reason == "memory"
    on = compile_trial(_cfg(pol, **model))
    run = on["run"]
    assert run.validated and run.metrics()["images_per_s"] > 0
    # the placed candidate is a lean one: not among the plan's without them, and leaner on
    # its fullest grid than every one of those
    placed = on["expand"].finalists[on["place"].placement.finalist].candidate
    peak = lambda c: max(g.mem_bytes for _, g in c.strategy)
    assert placed.strategy not in {c.strategy for c in off["plan"].candidates}
    assert peak(placed) < min(peak(c) for c in off["plan"].candidates)


FLASH_TOWER = dict(TOWER, width=64, hidden=172, image=56, layers=1, batch=2, attention="flash")


def test_flash_attention_tower_batch_against_the_reference():
    """model.attention=flash with a batch (one flash_attention op over (image, head) groups
    of one QKV tensor's column windows): the run matches the reference end to end and op
    by op (the flash op's read-back included); and an injected fault -- every group's keys
    and values read from image 0's rows, so image 1 attends to image 0 -- is caught."""
    import compiler.expand.flash as flash
    ok = compile_trial(_cfg(**FLASH_TOWER))
    assert ok["run"].validated, ok["run"].failed
    assert "flash_attention" in {op.kind for op in ok["model"].graph.ops}
    assert ok["run"].metrics()["ops_checked"] > 0
    T = ok["model"].graph.ops[[op.kind for op in ok["model"].graph.ops].index("flash_attention")].attr("tokens")
    block, calls = flash._block, []

    def image_0_keys(c, name, K, V, x, first, tile, col, rows, k0, kn, *rest):
        calls.append(int((k0 >= T).sum()))
        return block(c, name, K, V, x, first, tile, col, rows, k0 % T, kn, *rest)

    flash._block = image_0_keys
    try:
        bad = compile_trial(_cfg(**FLASH_TOWER))
    finally:
        flash._block = block
    assert sum(calls) > 0                       # image 1's key blocks existed and were redirected
    m = bad["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0
    assert m["first_failed_op"]["kind"] == "flash_attention", m["first_failed_op"]

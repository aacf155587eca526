"""policy.attn_variants (compiler/plan/attn.py): the best candidate with each grouped
(attention) matmul's next-best grids, in context and standalone, handed to expand, which
measures them exactly. A variant must differ from the best in one grouped matmul only,
win only by expand's exact cycles, validate on the simulator like every plan (read-back,
exchange check, the simulator's cycles equal to expand's), and a broken one be caught."""
from __future__ import annotations

from compiler.expand import matmul as ex_matmul
from compiler.phases import compile_trial, run_phase
from compiler.plan.layouts import groups_of
from compiler.policy import Policy
from helpers import target_cfg, trial_ok as ok

# the tiny tower: 4 heads over 16 tokens on 64 tiles; its scores and P·V are grouped
VIT = dict(name="vit", preset="custom", width=128, hidden=256, heads=4, tokens=16, layers=2)


def cfg(**policy):
    return dict(model=dict(VIT), target=target_cfg("tiny"), policy=dict(policy))


def labels(cand) -> dict:
    return {n: g.label for n, g in cand.strategy}


def test_variants_differ_from_the_best_in_one_grouped_matmul():
    """Brute force over the labels: the candidates plan adds are the beam's best with
    exactly one matmul's grid changed, that matmul grouped and inside the Repeat body;
    without the flag there are none."""
    c_on, c_off = cfg(), cfg(attn_variants=0)
    model = run_phase("model", {}, c_on)
    on, off = (run_phase("plan", {"model": model}, c) for c in (c_on, c_off))
    g = model.graph
    first, stop = g.body()
    best = labels(off.candidates[0])
    assert labels(on.candidates[0]) == best
    base = {tuple(sorted(labels(c).items())) for c in off.candidates}
    added = [c for c in on.candidates if tuple(sorted(labels(c).items())) not in base]
    assert added, "the tiny tower's attention should have variants"
    n = Policy().attn_variants
    assert len(added) <= 2 * 2 * n          # 2 grouped matmuls x (n in context + n standalone)
    for c in added:
        diff = [n for n, lab in labels(c).items() if lab != best[n]]
        assert len(diff) == 1, diff
        n = diff[0]
        assert first <= n < stop and len(groups_of(g.ops[n])) > 1
        assert c.resident == on.candidates[0].resident
    assert len(on.candidates) == len(off.candidates) + len(added)


def test_a_variant_is_chosen_validated_and_cheaper():
    """The tiny tower: expand's exact cycles pick a variant. Sends charged per receiver:
    with broadcast sends the beam's own best already has the grids a variant offers here; with
    LayerNorm halves the beam's own candidates already hold the mix that is placed."""
    pin = dict(broadcast_sends=False, ln_halves=False)
    on, off = compile_trial(cfg(**pin)), compile_trial(cfg(attn_variants=0, **pin))
    assert ok(on) and ok(off)
    placed = on["place"].tilegraph.label
    seen = {c.label for c in off["plan"].candidates} | {off["place"].tilegraph.label}
    assert placed not in seen, "a variant (or a mix of variants) should be placed"
    assert on["run"].metrics()["cycles"] < off["run"].metrics()["cycles"]


def test_a_variant_missing_an_operand_block_is_caught(monkeypatch):
    """Injected fault: each grouped matmul's pass loses its last operand gather (some
    tiles' A blocks never arrive), whichever grid (variant or not) expand picks;
    read-back must fail."""
    real = ex_matmul._matmul_pass
    hit = []

    def lossy(c, op, *a, **kw):
        n = len(c.bld.xfer)
        out = real(c, op, *a, **kw)
        if len(groups_of(op)) > 1 and len(c.bld.xfer) > n:
            del c.bld.xfer[-1]
            hit.append(op.outputs[0])
        return out

    monkeypatch.setattr(ex_matmul, "_matmul_pass", lossy)
    r = compile_trial(cfg())
    assert hit
    assert not r["run"].metrics()["validated"]

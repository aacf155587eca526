"""Weight-stationary: weights resident where their matmul reads them, read in place
through REPEAT-relocated operand addresses; planned as a second beam (no B exchange,
resident bytes within region 1) and chosen against homes by exact cycles and the
memory screen."""
from dataclasses import replace

from compiler import lower as lower_mod
from compiler.expand import expand_one
from compiler.phases import compile_trial, model_phase, policy_of, target_of
from compiler.plan import plan
from compiler.plan.matmul import stationary_weights
from helpers import target_cfg

VIT = dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=16, layers=3)
# deep enough that keeping every weight resident overflows region 1 under the plans the
# PopLibs-estimated MATMUL cost chooses (24 layers sufficed under the previous cost model)
DEEP = dict(VIT, width=128, hidden=512, layers=32)


def cfg(model=VIT, **policy):
    return dict(model=model, target=target_cfg("tiny"), policy=policy)


def test_stationary_vit_validates_and_moves_no_weights():
    r = compile_trial(cfg())
    best = r["expand"].finalists[0]
    assert best.candidate.stationary, "the cheaper stationary variant should win on a 3-layer ViT"
    assert r["report"].summary["status"] == "ok" and r["run"].metrics()["validated"]
    off = compile_trial(cfg(weight_stationary=False))
    assert not off["expand"].finalists[0].candidate.stationary
    assert r["run"].metrics()["cycles"] < off["run"].metrics()["cycles"]


def test_without_relocation_every_layer_reads_layer_0(monkeypatch):
    """Injected fault: drop the kernels' relocation entries, so each iteration reads the
    first member of the resident weights: the simulator's answer must then be wrong."""
    real = lower_mod.encode_code

    def no_kernel_relocs(*a, **k):
        blob, off, rl, ro = real(*a, **k)
        return blob, off, rl[:0], ro

    monkeypatch.setattr(lower_mod, "encode_code", no_kernel_relocs)
    monkeypatch.setattr(lower_mod.analysis, "reloc_entries", lower_mod.analysis.send_reloc_entries)
    r = compile_trial(cfg())
    assert r["expand"].finalists[0].candidate.stationary
    assert not r["run"].metrics()["validated"]


def test_deep_model_falls_back_to_homes_for_memory():
    """Resident weights cost count × the blocks on every tile: on a deep model some
    stationary variants fail the memory screen, while every homes variant fits."""
    c = cfg(DEEP)
    m = model_phase(c)
    shared = dict(graph=m.graph, target=target_of(c), policy=policy_of(c))
    cands = plan(m, target_of(c), policy_of(c)).candidates
    every = frozenset(n for n, _ in cands[0].strategy if m.graph.ops[n].inputs[1] in stationary_weights(m.graph))
    homes = [expand_one(replace(k, resident=frozenset()), **shared).reason for k in cands]
    still = [expand_one(replace(k, resident=every), **shared).reason for k in cands]
    assert set(homes) == {""} and "memory" in still


def test_plan_chooses_resident_weights_per_matmul_within_the_budget():
    """Half the candidates come from the beam that may keep each weight resident; a
    candidate's resident weights (count × its b blocks, summed here as if on one tile:
    an upper bound of the fullest tile) stay within the region-1 budget. On a deep model
    keeping every weight resident does not fit (some could, where it pays)."""
    from compiler.plan import resident_budget
    for model, deep in ((VIT, False), (DEEP, True)):
        c = cfg(model)
        m = model_phase(c)
        g, t = m.graph, target_of(c)
        p = plan(m, t, policy_of(c))
        assert (deep or any(k.resident for k in p.candidates)) and any(not k.resident for k in p.candidates)
        still = stationary_weights(g)
        for k in p.candidates:
            held = lambda ops: sum(model["layers"] * -(-gr.kb * gr.nb // 16) * 16   # fp8 weights: 1 byte
                                   for n, gr in k.strategy if n in ops)
            assert held(k.resident) <= resident_budget(t)
            assert k.resident <= {n for n, _ in k.strategy if g.ops[n].inputs[1] in still}
            if deep and not k.resident:
                assert held({n for n, _ in k.strategy if g.ops[n].inputs[1] in still}) > resident_budget(t)
    off = plan(m, t, policy_of(cfg(weight_stationary=False)))
    assert not any(k.resident for k in off.candidates)


def test_homes_fallback_when_resident_weights_fail_placement(monkeypatch):
    """The shortlist ends with the best homes candidate when every finalist keeps its
    weights resident; if placement fails for those (injected here), it is placed."""
    from compiler.place import phase as place_phase
    real = place_phase.place_finalist

    def refuse_resident(tg, *a, **k):
        support, addr, counts, worst, *rest = real(tg, *a, **k)
        if "stationary" in tg.label:                    # injected: a tile that did not fit
            worst = (0, None)
        return support, addr, counts, worst, *rest

    monkeypatch.setattr(place_phase, "place_finalist", refuse_resident)
    r = compile_trial(cfg())
    fins = r["expand"].finalists
    assert [f.candidate.stationary for f in fins] == [True] * (len(fins) - 1) + [False]
    assert r["place"].placement.finalist == len(fins) - 1
    assert r["run"].metrics()["validated"]

"""The spatial pipeline's arithmetic (compiler/plan/pipeline.py, issue #27) against a
step-by-step simulation of items moving through the groups that shares no code with it,
and its splits against their definitions."""
import pytest

from compiler.plan import pipeline
from compiler.target import Target
from helpers import target_cfg


def simulate(group_cycles, shift, items):
    """Bulk-synchronous steps: in step s group g works on item s - g (if there is one), every
    group waits for the slowest busy one, then outputs move on (one shift)."""
    G, clock, done, where = len(group_cycles), 0, [], {}
    s = 0
    while len(done) < items:
        busy = [g for g in range(G) if 0 <= s - g < items]
        clock += max(group_cycles[g] for g in busy) + shift
        for g in busy:
            if g == G - 1:
                done.append((s - g, clock))
            where[s - g] = g
        s += 1
    return clock, done


@pytest.mark.parametrize("cycles", [[100, 100, 100], [120, 90, 100, 80], [50]])
def test_fill_drain_and_latency_against_a_simulation(cycles):
    shift = 7
    st = pipeline.steady(cycles, shift)
    for items in (1, 2, 5, 40):
        clock, done = simulate(cycles, shift, items)
        assert [i for i, _ in done] == list(range(items))          # in order, each once
        assert clock <= st.total(items)                            # fill and drain: a bound
        if len(set(cycles)) == 1:
            assert clock == st.total(items)
    assert simulate(cycles, shift, 1)[1][0][1] <= st.latency
    # the steady state: one item per step once full
    c400, c401 = simulate(cycles, shift, 400)[0], simulate(cycles, shift, 401)[0]
    assert c401 - c400 == st.step == max(cycles) + shift


def test_split_and_tiles():
    for L in (1, 4, 27):
        for G in range(1, L + 1):
            c = pipeline.split(L, G)
            assert sum(c) == L and len(c) == G and max(c) - min(c) <= 1 and c == sorted(c, reverse=True)
            for T in (G, 64, 1472):
                w = pipeline.tiles_for(T, c)
                assert sum(w) == T and min(w) >= 1
                if T >= 8 * G:                     # proportional to layers, within a tile
                    assert all(abs(wi - T * ci / L) < 1 + 1e-9 for wi, ci in zip(w, c)), (L, G, T, w)
    with pytest.raises(ValueError, match="groups=5"):
        pipeline.split(4, 5)


def test_shift_is_one_exchange_of_the_busiest_tile():
    t = Target.from_dict(target_cfg("tiny"))
    rows, width = 30, 64
    busiest = -(-rows * width * 2 // 7)                    # 7 senders, 9 receivers: a sender's share
    assert pipeline.shift_cycles(t, rows, width, 2, 7, 9) == \
        t.exchange_phase_cycles + t.sync_cycles + -(-busiest // t.exchange_bytes_per_cycle)


def test_a_group_program_runs_on_its_own_tiles():
    """What experiments/throughput/groups.py prices, on the tiny target: a tower of 4
    layers cut into 2 groups of 2 layers on 32 tiles each; a group's program (compiled on a
    target of its tiles) runs and validates on the simulator, uses only its tiles, and the
    simulator's cycles are expand's, which the step is made of."""
    from compiler.phases import compile_trial
    counts = pipeline.split(4, 2)
    tiles = pipeline.tiles_for(64, [n + 1 for n in counts])      # both groups hold an end
    assert counts == [2, 2] and tiles == [32, 32]
    tower = dict(name="vit", preset="custom", scope="tower", width=64, hidden=172, heads=2, image=56, patch=14,
                 pool="map", input="", layers=counts[0])
    r = compile_trial(dict(model=tower, target=dict(target_cfg("tiny"), tiles=tiles[0]), policy={}))
    assert r["run"].validated, r["run"].failed
    assert r["place"].tilegraph.tiles == tiles[0]
    cycles = r["expand"].finalists[r["place"].placement.finalist].analysis["cycles"]
    assert r["run"].cycles == cycles
    st = pipeline.steady([cycles, cycles], pipeline.shift_cycles(Target.from_dict(target_cfg("tiny")),
                                                                   30, 64, 2, *tiles))
    assert st.step > cycles and st.latency == 2 * st.step

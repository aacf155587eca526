"""`join_lns` (joinlns.py): a large-neighbourhood search over a partner fold's joins.
What it returns must be a placement the independent validator accepts on the
original problem (the validator shares no code with the folds); an injected wrong
join must be caught before it is returned; a rejected move must leave the
incumbent as it was (the undo); the same input gives the same moves; the round
robin makes moves only with the flag."""
import sys
from pathlib import Path

import numpy as np
import pytest

from place_cases import guillotine_problem

from compiler.place import PlaceConfig, validate
from compiler.place import joinlns as J
from compiler.place.coalesce import PARTNER_SCHEDULES, Coalesced
from compiler.place.instance import Instance
from compiler.place.skyline_jit import CompiledSkyline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "placement_corpus"))
import generate  # noqa: E402

CFG = PlaceConfig()


def _part(p):
    return Instance(p)      # the whole problem (the kernel splits independent parts itself)


def _walk(p, moves=12, probe=2, window=4, quiet=False):
    """(sub, lns, addr | None) after up to `moves` moves on the (0, 1 %) fold."""
    sub = _part(p)
    L = J.JoinLNS(J.Coalesced(sub, 0.0, False, PARTNER_SCHEDULES[0], quiet), 0, window, probe)
    for _ in range(moves):
        a, *_ = L.move(CompiledSkyline, CFG)
        if a is not None:
            return sub, L, a
    return sub, L, None


def _tilings(k=30):
    return [guillotine_problem(s, 60, 1024, 24, 0.02 if s % 2 else 0.0) for s in range(k)]


def test_moves_place_and_the_validator_agrees():
    placed = 0
    for p in _tilings():
        sub, L, a = _walk(p)
        if a is not None:
            placed += 1
            assert validate(p, np.array(a)) == []
    assert placed >= 5


def test_an_injected_wrong_join_is_caught(monkeypatch):
    """Fault: every fold (the root and each child) joins its last band's members into
    band 0 at band 0's offset (a join of requests the kernel placed apart): the kernel
    places the fold, the expansion overlaps, and the validator inside joinlns must
    refuse it before anything is returned."""
    class Wrong(Coalesced):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            last = self.gid == self.n - 1
            self.gid = np.where(last, 0, self.gid)
            self.rel = np.where(last, 0, self.rel)
    monkeypatch.setattr(J, "Coalesced", Wrong)
    caught = 0
    for p in _tilings(12):
        try:
            _walk(p, moves=4, probe=2000)
        except RuntimeError as e:
            assert "validator rejects" in str(e)
            caught += 1
    assert caught >= 3


def test_a_rejected_move_is_undone_and_a_kept_one_never_scores_less():
    p, _ = generate.guillotine(20265928, 300, heavy=True, slack=0.01)
    sub = _part(p)
    L = J.JoinLNS(Coalesced(sub, 0.0, False, PARTNER_SCHEDULES[0]), 0, 8, 4)
    rejected = kept = 0
    for _ in range(12):
        inc, forbid, score, key = L.inc, L.inc.forbid, L.score, L.inc.key()
        a, x, *_ = L.move(CompiledSkyline, CFG)
        if a is not None:
            assert validate(p, np.array(a)) == []
            break
        if L.log[-1][-1]:
            kept += 1
            assert x is not None and L.inc is not inc and (score is None or L.score >= score)
            assert L.inc.forbid > forbid          # the window's joins forbidden
        else:
            rejected += 1
            assert x is None and L.inc is inc and L.inc.forbid == forbid
            assert score is None or L.score == score      # (the first move probes the root)
            assert L.inc.key() == key
    assert rejected and kept


def test_same_input_same_moves():
    p, _ = generate.guillotine(20265928, 300, heavy=True, slack=0.01)
    logs = []
    for _ in range(2):
        sub, L, a = _walk(p, moves=8, probe=4, window=8)
        logs.append((L.log, L.inc.key(), None if a is None else list(a)))
    assert logs[0] == logs[1]


@pytest.mark.parametrize("on", [True, False])
def test_the_round_robin_moves_only_with_the_flag(on, monkeypatch):
    from compiler.place import search
    calls = []
    move = J.JoinLNS.move

    def spy(self, CS, cfg):
        calls.append(self.chain)
        return move(self, CS, cfg)
    monkeypatch.setattr(J.JoinLNS, "move", spy)
    cfg = PlaceConfig(join_lns=on, canonical_node_budget=60000, join_lns_probe=4)
    p, _ = generate.guillotine(20265932, 500, heavy=True, slack=0.01)   # 2 kept moves in a chain
    sub = _part(p)
    rr = search._RoundRobin(sub, cfg, None, CompiledSkyline)
    rr.tries[:] = []
    rr.join(search._partners(PARTNER_SCHEDULES, cfg), 0)
    a, st = rr.loop()
    assert bool(calls) == on
    if on:
        assert rr.lns and rr.lns_nodes > 0
        # an incumbent replaced in the round robin (a second kept move) is attempted
        # no more: the loop skips it (a stale entry once broke eager refolds' index)
        Ls = {id(L): L for L in rr.lns.values()}.values()
        assert any(sum(1 for m in L.log if m[-1]) >= 2 for L in Ls)
        incs = {id(L.inc) for L in Ls}
        assert all(c.schedule is not None for _, c in rr.tries if c is not None)
        assert all(id(c) in incs or c.depth > 0 or id(c) in {id(L.root) for L in Ls}
                   for _, c in rr.tries if c is not None and c.schedule is not None)
    if a is not None:
        assert validate(p, np.array(a)) == []

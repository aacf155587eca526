"""`cpsat_fallback`: a banked tile the searches leave unknown goes to CP-SAT;
its placement is checked by the independent validator before it is trusted,
and the place phase's budgets (no time limit) make it reproducible."""
import sys
from pathlib import Path

import numpy as np

from compiler.place import PLACED, UNKNOWN, PlaceConfig, solve, validate
from compiler.place import cpsat

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "placement_corpus"))
import generate  # noqa: E402

# tight-20260919: banked, the searches' node budgets run out (unknown at 60 s before)
BUDGETS = PlaceConfig(canonical_node_budget=5000, search_node_budget=2000)


def _tight():
    p, wit = generate.banked(generate.SEED0 + 7, spare=False)
    assert validate(p, wit) == []
    return p


def test_unknown_banked_tile_is_placed_by_cpsat_reproducibly():
    p = _tight()
    assert solve(p, BUDGETS.override(cpsat_fallback=False)).status == UNKNOWN
    a = solve(p, BUDGETS)
    assert a.status == PLACED and a.method == "cpsat" and validate(p, a.addr) == []
    b = solve(p, BUDGETS)
    assert np.array_equal(a.addr, b.addr)       # one worker, deterministic time


def test_invalid_cpsat_answer_is_not_trusted(monkeypatch):
    p = _tight()
    calls = []

    def wrong(problem, **kw):   # an injected fault: everything at the base address
        calls.append(1)
        addr = np.full(len(problem), int(problem.memory_base), np.int64)
        return cpsat.Solution(PLACED, addr, method="cpsat")

    monkeypatch.setattr(cpsat, "solve_cpsat", wrong)
    assert solve(p, BUDGETS).status == UNKNOWN and calls == [1]


def test_only_tiles_up_to_cpsat_max_requests(monkeypatch):
    calls = []
    monkeypatch.setattr(cpsat, "solve_cpsat", lambda problem, **kw: calls.append(1))
    p = _tight()
    assert solve(p, BUDGETS.override(cpsat_max_requests=len(p) - 1)).status == UNKNOWN
    assert calls == []

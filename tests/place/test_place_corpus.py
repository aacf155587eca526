"""A few corpus cases end to end (the full benchmark lives in
experiments/placement_corpus): generated witnesses are valid, the allocator
places and the validator accepts; zero-slack instances go to the skyline."""
import sys
from pathlib import Path

import numpy as np

from compiler.place import PLACED, PlaceConfig, Problem, solve, validate

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "placement_corpus"))
import generate  # noqa: E402


def test_banked_cases_place_and_validate():
    for k in (0, 5):
        p, wit = generate.banked(generate.SEED0 + k, spare=True)
        assert validate(p, wit) == []
        sol = solve(p)
        assert sol.status == PLACED and validate(p, sol.addr) == [], k


def test_tight_case_needs_search():
    p, wit = generate.banked(generate.SEED0 + 5, spare=False)   # a tight case search places
    greedy_only = PlaceConfig(search=False, canonical=False, cpsat_fallback=False)
    assert solve(p, greedy_only).status != PLACED
    sol = solve(p)
    assert sol.status == PLACED and sol.method.startswith("search")
    assert validate(p, sol.addr) == []


def test_zero_slack_skyline():
    p, wit = generate.zero_slack(7, 80)
    sol = solve(p)
    assert sol.status == PLACED and validate(p, sol.addr) == []
    off = solve(p, PlaceConfig(canonical_skyline=False, canonical_node_budget=2000, search=False))
    assert off.status != "infeasible"   # budget, never a false proof


def test_greedy_250_requests_fits_greedily():
    rng = np.random.default_rng(0)
    n = 250
    s = rng.integers(0, 100, n)
    p = Problem(311296, 524288, 950272, 16384, size=rng.integers(64, 3000, n),
                align=2 ** rng.integers(2, 7, n), start=s, end=s + rng.integers(1, 20, n),
                region=rng.integers(0, 2, n))
    sol = solve(p)
    assert sol.status == PLACED and sol.method.startswith("greedy") and sol.nodes == 0
    assert validate(p, sol.addr) == []


def test_validator_shares_no_code_with_allocator():
    src = (Path(__file__).resolve().parents[2] / "compiler" / "place" / "validate.py").read_text()
    imports = [ln for ln in src.splitlines() if ln.startswith(("import ", "from "))]
    assert imports == ["from __future__ import annotations"], imports

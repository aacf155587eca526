"""Differential: the allocator (and each search on its own) against the exact
CP-SAT reference on small random problems. A placement must validate; the
allocator may say UNKNOWN, but never contradict CP-SAT."""
import pytest

from compiler.place import INFEASIBLE, PLACED, UNKNOWN, PlaceConfig, solve, validate
from compiler.place.addrsearch import AddressSearch
from compiler.place.canonical import CanonicalSearch
from compiler.place.cpsat import solve_cpsat
from compiler.place.instance import Instance
from place_cases import brute_force, random_problem

GREEDY_OFF = dict(greedy_online=False, order_lifetime=False, order_alignment=False,
                  order_end_first=False)


def _cases(k, n):
    return [random_problem(seed, n=n, fill=0.15 + 0.3 * (seed % 5) / 4) for seed in range(k)]


@pytest.fixture(scope="module")
def reference():
    return [(p, solve_cpsat(p, time_limit_s=20)) for p in _cases(40, 8)]


def test_solve_never_contradicts_cpsat(reference):
    seen = set()
    for k, (p, ref) in enumerate(reference):
        assert ref.status != UNKNOWN
        if ref.status == PLACED:
            assert validate(p, ref.addr) == [], k
        sol = solve(p, PlaceConfig(cpsat_fallback=False))   # the allocator's own answer
        seen.add((sol.status, ref.status))
        if sol.status == PLACED:
            assert validate(p, sol.addr) == [], k
            assert ref.status == PLACED, k
        if sol.status == INFEASIBLE:
            assert ref.status == INFEASIBLE, (k, sol.method)
    assert (PLACED, PLACED) in seen and (INFEASIBLE, INFEASIBLE) in seen


@pytest.mark.parametrize("mode", ["address", "canonical", "skyline"])
def test_each_search_alone_is_sound(reference, mode):
    # the skyline's "leave this floor empty" branch steps by alignment: slow to
    # exhaust with slack, so it gets a small budget here (soundness is the point)
    budget = 2_000 if mode == "skyline" else 50_000
    cfg = PlaceConfig(canonical_node_budget=budget, search_node_budget=20_000)
    found = proved = 0
    for k, (p, ref) in enumerate(reference):
        inst = Instance(p)
        if mode == "address":
            a, st = AddressSearch(inst, cfg).run()
        else:
            a, st = CanonicalSearch(inst, cfg, skyline=(mode == "skyline")).run()
        if a is not None:
            found += 1
            assert validate(p, a) == [], (k, mode, validate(p, a)[:2])
        if st == "exhausted" and mode != "address":   # the address search samples values
            proved += 1
            assert ref.status == INFEASIBLE, (k, mode)
    assert found > 0
    if mode == "canonical":
        assert proved > 0


def test_canonical_flags_off_still_sound(reference):
    cfg = PlaceConfig(dominance=False, section_inference=False, canonical_restarts=False,
                      canonical_skyline=False, search=False, canonical_node_budget=200_000,
                      **GREEDY_OFF)
    for k, (p, ref) in enumerate(reference[:20]):
        sol = solve(p, cfg)
        if sol.status == PLACED:
            assert validate(p, sol.addr) == []
        if sol.status != UNKNOWN:
            assert sol.status == ref.status, k


def test_cpsat_agrees_with_brute_force_on_tiny():
    for seed in range(6):
        p = random_problem(100 + seed, n=3, fill=0.6, r0_elems=1, r1_pairs=1)
        p.align[:] = [256, 512, 256]
        ref = solve_cpsat(p, time_limit_s=10)
        assert (ref.status == PLACED) == brute_force(p), seed

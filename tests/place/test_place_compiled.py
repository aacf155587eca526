"""The compiled searches (skyline_jit.py) against CP-SAT on small pure problems
(one arena, alignment, no banks): a placement must validate, and exhausting
the tree (a proof of infeasibility) must agree with CP-SAT, with every pruning
flag on and off."""
import numpy as np
import pytest

from place_cases import guillotine_rects

from compiler.place import INFEASIBLE, PLACED, UNKNOWN, PlaceConfig, Problem, validate
from compiler.place.cpsat import solve_cpsat
from compiler.place.instance import Instance
from compiler.place.search import pure_part as pure
from compiler.place.skyline_jit import CompiledSkyline


def _pure(seed, n=9, cap=64):
    """Random lifetimes; sizes so that the peak is near the capacity (some fit,
    some do not); alignment 1, 2 or 4."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 10, n)
    e = s + rng.integers(1, 6, n)
    al = rng.choice([1, 1, 2, 4], n)
    size = rng.integers(4, 24, n)
    p = Problem(0, cap, cap, cap, size=size, align=al, start=s, end=e, region=np.zeros(n, np.int8))
    live = max(size[(s <= t) & (t < e)].sum() for t in range(20))
    p.size = np.maximum(1, (size * cap * rng.uniform(0.85, 1.1) / live).astype(np.int64))
    return p


@pytest.fixture(scope="module")
def reference():
    out = []
    for seed in range(40):
        p = _pure(seed)
        out.append((p, solve_cpsat(p, time_limit_s=20).status))
    return out


FLAGS = [dict(), dict(section_inference=False), dict(hatless_pruning=False),
         dict(decompose=False), dict(dominance=False), dict(valley_inference=False)]


@pytest.mark.parametrize("over", FLAGS, ids=lambda d: ",".join(d) or "default")
@pytest.mark.parametrize("skyline", [True, False], ids=["skyline", "monotone"])
def test_compiled_search_is_sound_and_complete(reference, over, skyline):
    cfg = PlaceConfig().override(**over)
    seen = set()
    for k, (p, ref) in enumerate(reference):
        assert ref != UNKNOWN
        inst = Instance(p)
        assert pure(inst)
        cs = CompiledSkyline(inst, cfg)
        r = cs.run(200_000, cs.preorders(k % 6), skyline)
        if r == -1:                         # without pruning a tree may be too big: no verdict
            assert over, k                  # with every pruning on, tiny cases are decided
            continue
        got = PLACED if r == 1 else INFEASIBLE
        if r == 1:
            assert validate(p, cs.addr) == [], (k, validate(p, cs.addr)[:2])
        assert got == ref, (k, got, ref)
        seen.add(got)
    assert seen == {PLACED, INFEASIBLE}


def _guillotine(seed, n=14, cap=64, horizon=12):
    t0, t1, a0, a1 = map(np.array, zip(*guillotine_rects(seed, n, cap, horizon)))
    return Problem(0, cap, cap, cap, size=a1 - a0, align=np.ones(n, np.int64), start=t0, end=t1,
                   region=np.zeros(n, np.int8))


def test_zero_slack_skyline_never_refutes_a_tiling():
    """On feasible zero-slack tilings the skyline finds a placement, never a
    false proof (hatless pruning and decomposition fire constantly there)."""
    cfg = PlaceConfig()
    for seed in range(60):
        p = _guillotine(seed)
        cs = CompiledSkyline(Instance(p), cfg)
        r = cs.run(1_000_000, cs.preorders(seed % 6), True)
        assert r == 1, seed
        assert validate(p, cs.addr) == []

"""`stair_folds` (stairfold.py, skyline_stair.py): staircase bands and their kernel.

A stair fold's placement, expanded, must be a placement of the original problem:
checked by the independent validator (which shares no code with the fold or the
kernel), forward and time-mirrored, on exact and shrunk guillotine tilings; a
kernel that under-counts a band's height must be caught by the same check. With
no join at all the kernel is a complete search, so its verdicts must agree with
a brute-force enumeration on small random problems."""
import numpy as np
import pytest

from place_cases import brute_force, guillotine_rects

from compiler.place import PLACED, PlaceConfig, Problem, solve, validate
from compiler.place.coalesce import PARTNER_SCHEDULES
from compiler.place.instance import Instance, SubInstance
from compiler.place.skyline_stair import StairSkyline
from compiler.place.stairfold import StairFold


def _tiling(seed, n=28, cap=256, horizon=16, shrink=0.0):
    t0, t1, a0, a1 = map(np.array, zip(*guillotine_rects(seed, n, cap, horizon)))
    rng = np.random.default_rng(seed)
    size = np.maximum(1, ((a1 - a0) * (1 - shrink * rng.random(n))).astype(np.int64))
    return Problem(0, cap, cap, cap, size=size, align=np.ones(n, np.int64), start=t0,
                   end=t1, region=np.zeros(n, np.int8))


def _placements(seeds, mirror=False, fault=None):
    """Per seed: (problem, addresses, stair joins made) for the tilings whose
    stair fold the kernel places."""
    out = []
    for seed in seeds:
        p = _tiling(seed, shrink=0.02 if seed % 2 else 0.0)
        inst = Instance(p)
        sf = StairFold(SubInstance(inst, range(inst.n)), PARTNER_SCHEDULES[seed % 2])
        fold = sf.mirrored() if mirror else sf
        ss = StairSkyline(fold, PlaceConfig())
        if fault is not None:
            fault(ss)
        for seed2 in range(4):
            if ss.run(100_000, ss.preorders(seed2)) == 1:
                out.append((p, fold.expand(ss.addr), sf.joins))
                break
    return out


@pytest.mark.parametrize("mirror", [False, True])
def test_stair_placements_are_placements_of_the_original(mirror):
    got = _placements(range(40), mirror)
    assert len(got) >= 15
    assert sum(j > 0 for _, _, j in got) >= 5      # staircase joins were made and placed
    for p, addr, _ in got:
        assert validate(p, np.array(addr)) == []


def test_an_undercounted_height_is_caught():
    # fault: the kernel believes each band's top (per section) 10 % lower than its
    # members reach; what it places overlaps, and the validator must say so
    def lower(ss):
        cut = ss.hgt - ss.hgt // 10
        for k in range(ss.n):
            a, b = ss.hptr[k], ss.hptr[k + 1]
            np.subtract.at(ss.tot0, np.arange(ss.s0[k], ss.s1[k]), ss.hgt[a:b] - cut[a:b])
        ss.hgt[:] = cut
        ss.ext[:] = [cut[a:b].max() for a, b in zip(ss.hptr[:-1], ss.hptr[1:])]
        ss.minh[:] = [cut[a:b].min() for a, b in zip(ss.hptr[:-1], ss.hptr[1:])]
    got = _placements(range(40), fault=lower)
    assert len(got) >= 15
    assert sum(validate(p, np.array(addr)) != [] for p, addr, _ in got) >= 5


def _pure(seed, n=6, cap=24):
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 6, n)
    end = start + rng.integers(1, 4, n)
    size = rng.integers(2, 12, n)
    return Problem(0, cap, cap, cap, size=size, align=np.ones(n, np.int64), start=start,
                   end=end, region=np.zeros(n, np.int8))


def test_unjoined_kernel_agrees_with_brute_force():
    # no schedule and no stair tolerance: one band per request, so the kernel is a
    # complete search and exhausting it is a proof
    seen = {True: 0, False: 0}
    for seed in range(60):
        p = _pure(seed)
        inst = Instance(p)
        sf = StairFold(SubInstance(inst, range(inst.n)), (), tol=-1.0)
        assert sf.n == inst.n
        ss = StairSkyline(sf, PlaceConfig())
        r = ss.run(1_000_000, ss.preorders(0))
        assert r in (0, 1)
        truth = brute_force(p)
        assert (r == 1) == truth, seed
        seen[truth] += 1
        if r == 1:
            assert validate(p, np.array(sf.expand(ss.addr))) == []
    assert min(seen.values()) >= 10


def test_the_flag_places_through_the_round_robin(monkeypatch):
    # a tiling the greedy orders and the short attempts do not place: the round
    # robin runs, with the stair variants attempted when the flag is on only; the
    # answer is validated
    runs = []
    run0 = StairSkyline.run
    monkeypatch.setattr(StairSkyline, "run", lambda self, *a: runs.append(1) or run0(self, *a))
    p = _tiling(7, n=60, cap=4096, horizon=40, shrink=0.01)
    for on in (False, True):
        runs.clear()
        sol = solve(p, PlaceConfig(stair_folds=on, canonical_node_budget=2_000_000))
        assert sol.status == PLACED
        assert validate(p, np.array(sol.addr)) == []
        assert bool(runs) == on

"""`time_mirror` (instance.py time_mirror, search.py): the part with time reversed
is searched beside it. Its placements must be placements of the original
request for request (checked by the independent validator on the *original*
problem, which shares no code with the mirror), and a wrong mirror must be
caught by the same check."""
import sys
from pathlib import Path

import numpy as np
import pytest

from place_cases import guillotine_rects

from compiler.place import PLACED, PlaceConfig, Problem, solve, validate
from compiler.place.coalesce import PARTNER_SCHEDULES, Coalesced
from compiler.place.instance import Instance, time_mirror
from compiler.place.skyline_jit import CompiledSkyline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "placement_corpus"))
import generate  # noqa: E402


def _tiling(seed, n=24, cap=256, horizon=16, shrink=0.0):
    t0, t1, a0, a1 = map(np.array, zip(*guillotine_rects(seed, n, cap, horizon)))
    rng = np.random.default_rng(seed)
    size = np.maximum(1, ((a1 - a0) * (1 - shrink * rng.random(n))).astype(np.int64))
    return Problem(0, cap, cap, cap, size=size, align=np.ones(n, np.int64), start=t0,
                   end=t1, region=np.zeros(n, np.int8))


def _mirrored_placements(mirror, seeds=range(30)):
    """Per seed: (problem, address list) placed via the mirror's partner fold."""
    out = []
    for seed in seeds:
        p = _tiling(seed, shrink=0.02 if seed % 2 else 0.0)
        m = mirror(Instance(p))
        co = Coalesced(m, schedule=PARTNER_SCHEDULES[0])
        cs = CompiledSkyline(co, PlaceConfig())
        if cs.run(200_000, cs.preorders(0)) == 1:
            out.append((p, co.expand(cs.addr)))
    return out


def test_mirror_placements_are_placements_of_the_original():
    got = _mirrored_placements(time_mirror)
    assert len(got) >= 20
    for p, addr in got:
        assert validate(p, np.array(addr)) == []


def test_a_wrong_mirror_is_caught():
    # fault: lifetimes reversed but each shifted one event later, so live pairs change
    def shifted(sub):
        m = time_mirror(sub)
        m.start = [s + 1 if k % 3 == 0 else s for k, s in enumerate(m.start)]
        m.end = [e + 1 if k % 3 == 0 else e for k, e in enumerate(m.end)]
        return m
    got = _mirrored_placements(shifted)
    assert any(validate(p, np.array(addr)) != [] for p, addr in got)


def test_mirror_reverses_time_and_nothing_else():
    p = _tiling(3)
    inst = Instance(p)
    m = time_mirror(inst)
    t = min(inst.start) + max(inst.end)
    assert m.start == [t - e for e in inst.end] and m.end == [t - s for s in inst.start]
    assert m.ext == inst.ext and m.ov == inst.ov and m.windows == inst.windows
    mm = time_mirror(m)
    assert mm.start == inst.start and mm.end == inst.end
    assert inst.start != m.start          # the original is untouched


def test_a_mirrored_fold_is_a_distinct_variant():
    inst = Instance(_tiling(5))
    a = Coalesced(inst, schedule=PARTNER_SCHEDULES[0])
    b = Coalesced(time_mirror(inst), schedule=PARTNER_SCHEDULES[0])
    assert a.key() != b.key()


@pytest.mark.parametrize("on", [True, False])
def test_the_flag_adds_the_mirrored_folds(on, monkeypatch):
    # hard heavy-400-nz (seed 20265929): placed by partner folding after the short
    # attempts; one process (the portfolio's workers are other processes)
    p, _ = generate.guillotine(20265929, 400, heavy=True, slack=0.01)
    made = []
    init = Coalesced.__init__

    def spy(self, sub, *a, **kw):
        made.append(getattr(sub, "mirrored", False))
        init(self, sub, *a, **kw)
    monkeypatch.setattr(Coalesced, "__init__", spy)
    sol = solve(p, PlaceConfig(time_limit_s=60, canonical_node_budget=0, portfolio=False,
                               time_mirror=on))
    assert sol.status == PLACED and validate(p, sol.addr) == []
    assert made.count(True) == (4 if on else 0)   # two schedules, each with its quiet twin

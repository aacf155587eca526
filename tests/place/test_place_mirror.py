"""`time_mirror` (instance.py time_mirror, search.py): every other attempt of a
variant searches it with time reversed. The mirror's placements must be placements of the original
request for request (checked by the independent validator on the *original*
problem, which shares no code with the mirror), and a wrong mirror must be
caught by the same check."""
import sys
from pathlib import Path

import numpy as np
import pytest

from place_cases import guillotine_problem

from compiler.place import PlaceConfig, validate
from compiler.place.coalesce import PARTNER_SCHEDULES, Coalesced
from compiler.place.instance import Instance, time_mirror
from compiler.place.skyline_jit import CompiledSkyline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "placement_corpus"))
import generate  # noqa: E402


def _tiling(seed, n=24, cap=256, horizon=16, shrink=0.0):
    return guillotine_problem(seed, n, cap, horizon, shrink)


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


@pytest.mark.parametrize("on", [True, False])
def test_the_flag_reverses_every_other_attempt(on, monkeypatch):
    """The round robin's attempts: with the flag, those of odd seed + round run on
    the time-reversed search; without it, none does."""
    from compiler.place import search
    runs = []
    run = CompiledSkyline.run

    def spy(self, limit, pre, sky=True):
        runs.append(bool(getattr(self, "mirrored", False)))
        return run(self, limit, pre, sky)
    monkeypatch.setattr(CompiledSkyline, "run", spy)
    init = CompiledSkyline.__init__

    def spy_init(self, sub, cfg):
        init(self, sub, cfg)
        self.mirrored = getattr(sub, "mirrored", False)
    monkeypatch.setattr(CompiledSkyline, "__init__", spy_init)
    cfg = PlaceConfig(time_mirror=on, canonical_node_budget=6000)
    # the unfolded part of a near-zero-slack heavy tiling: not placed in the first attempts
    p, _ = generate.guillotine(20265928, 300, heavy=True, slack=0.01)
    rr = search._RoundRobin(Instance(p), cfg, None, CompiledSkyline)
    a, st = rr.loop()
    assert len(runs) >= 6
    # seeds 0, 1, 2, 3, 4 (round 0), each skyline then monotone: odd seeds reversed
    assert runs[:6] == ([False, False, True, True, False, False] if on else [False] * 6)
    if a is not None:
        assert validate(p, np.array(a)) == []

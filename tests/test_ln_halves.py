"""policy.ln_halves (compiler/plan/lnhalves.py): a LayerNorm over row halves on two tiles,
LAYERNORM F_LN_STATS + an exchange of the f32 statistics + F_LN_HALF. A ViT on the tiny
target wide enough for the beam to choose halves (512 columns) runs on the simulator with
the flag off and on and validates op by op against the numpy reference; on, its LayerNorms
are halves, it takes fewer cycles, the simulator's equal expand's, and the plan's estimate
falls by what expand's body falls; a fault (the statistics sent to the wrong row block's
tiles) must be caught."""
import pytest

from compiler import isa
from compiler.expand import lnhalves as expand_lnhalves_mod
from helpers import flag_validates_cheaper, kernel_flags, plan_prices_expand, tiny_trial

WIDE = dict(name="vit", preset="custom", width=512, hidden=1024, heads=2, tokens=15, layers=2)


def _trial(on: bool):
    return tiny_trial(WIDE, ln_halves=on)


@pytest.fixture(scope="module")
def both():
    return _trial(False), _trial(True)


def test_halves_validate_with_fewer_cycles(both):
    off, on = both
    assert (kernel_flags(off, isa.LAYERNORM) == 0).all()
    f = kernel_flags(on, isa.LAYERNORM)
    assert (f == isa.F_LN_STATS).sum() == (f == isa.F_LN_HALF).sum() > 0 and "halves:" in on["plan"].candidates[0].label
    flag_validates_cheaper(off, on)


def test_plan_prices_the_halves_expand_builds(both):
    """Same grids; the plan's estimate falls by what expand's exact body cycles fall."""
    plan_prices_expand(*both)


def test_statistics_to_the_wrong_tiles_are_caught(monkeypatch):
    monkeypatch.setattr(expand_lnhalves_mod, "_partner", lambda A, B: (A * 2 + (1 - B) + 2) % (2 * (A.max() + 1)))
    bad = _trial(True)
    m = bad["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0

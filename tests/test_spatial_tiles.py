"""policy.pipeline_fit (compiler/spatial_tiles.py): a pipeline group that does not fit on
tiles // G tiles (here the head's: its weights are one more layer's) gets the fewest tiles
it fits on and a share of the rest. Held against a brute-force count of the tiles each group
fits on; the trial validates on the simulator with unequal groups; without the flag, or
when the groups' least counts overfill the chip, the rejection names the group."""
import pytest

from compiler.models import photos
from compiler.phases import compile_trial, model_phase, policy_of, target_of
from compiler.spatial import group_models
from compiler.spatial_tiles import Fits, shares
from helpers import target_cfg

# wide enough that weights, not activations, fill a tile: 4 layers and the head on a 192 KiB tile
WIDE = dict(name="vit", preset="custom", width=256, hidden=1024, heads=4, image=56, patch=14, layers=4, gelu="erf",
            input=photos.PREFIX + photos.HELD_OUT[0])


def cfg(tiles: int, **policy) -> dict:
    return dict(model=WIDE, target={**target_cfg("tiny"), "tiles": tiles}, policy={"pipeline_groups": 2, **policy})


@pytest.fixture(scope="module")
def least():
    """The fewest tiles each group expands on, counted one by one (no bisection)."""
    c = cfg(30)
    fits = Fits(group_models(model_phase(c), 2, policy_of(c).deferred_norm), target_of(c), policy_of(c))
    return [next(w for w in range(1, 31) if fits.ok(k, w)) for k in range(2)]


def test_shares_hand_out_every_tile_in_proportion():
    for least_, tiles in (([12, 17], 30), ([5, 5, 7], 17), ([3, 9, 9, 3], 40), ([10], 10)):
        got = shares(least_, tiles)
        assert sum(got) == tiles and all(g >= w for g, w in zip(got, least_))
        ideal = [w * tiles / sum(least_) for w in least_]
        assert all(abs(g - i) < 1 for g, i in zip(got, ideal)), (got, ideal)


def test_the_head_group_gets_more_tiles_and_validates(least):
    """30 tiles: the head's group does not fit on 15 and the embedding's does; each gets at
    least its brute-force count, together every tile, and the trial validates op by op."""
    assert least[0] <= 15 < least[1] and sum(least) <= 30, least
    r = compile_trial(cfg(30))
    tiles = r["expand"].metrics()["pipeline_tiles"]
    assert sum(tiles) == 30 and all(t >= w for t, w in zip(tiles, least)) and tiles == shares(least, 30)
    m = r["run"].metrics()
    assert m["validated"], m.get("failed")
    assert m["ops_checked"] > 0 and m["ops_failed"] == 0 and m["exchanges_failed"] == 0
    assert m["boundaries_checked"] == 1 and m["boundaries_failed"] == 0


def test_without_the_flag_or_room_the_group_is_rejected(least):
    off = compile_trial(cfg(30, pipeline_fit=False))["report"].summary
    assert off["status"] == "rejected" and off["rejected"]["reason"] == "memory"
    assert "pipeline group 1" in off["rejected"]["message"]
    few = sum(least) - 1                       # one tile short of both groups' least counts
    short = compile_trial(cfg(few))["report"].summary
    assert short["status"] == "rejected" and "pipeline group" in short["rejected"]["message"]
    assert f"{sum(least)} together, over the chip's {few}" in short["rejected"]["message"]


def test_a_group_that_does_not_place_gets_more_tiles(monkeypatch):
    """32 tiles: the groups get 13 + 19; a placement that fails the head's group on 19 tiles
    (injected) gives it 20 (1/64 more, at least one), and the embedding's group the rest."""
    import compiler.place.phase as phase
    from compiler.phases import run_phase
    from compiler.result import Rejection
    real, seen = phase.place, []

    def place(res, t, cfg, mapper=None):
        seen.append(t.tiles)
        if t.tiles == 19:
            return phase.PlaceResult(rejection=Rejection("place", "memory", "injected", {"tile": 0}))
        return real(res, t, cfg, mapper)
    monkeypatch.setattr(phase, "place", place)
    c, r = cfg(32), {}
    for name in ("model", "plan", "expand"):
        r[name] = run_phase(name, r, c)
    assert 19 in seen and r["expand"].metrics()["pipeline_tiles"] == [12, 20]

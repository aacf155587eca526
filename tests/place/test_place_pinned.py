"""pin_whole_lifetime (compiler/place/pinned.py): the requests live at every event are
fixed first and the rest searched. The fixture is a real tile: tile 18 of the 27-layer
So400m f16 batch-6 plan (its plain-homes candidate, ~304 KB of weight homes, a 158 KB A
block), dumped by the place phase's format. Under the phase's budgets the whole-tile
search ends `unknown` on it after 80-130 s and CP-SAT needs ~280 s; pinned, it places at once."""
import json
from pathlib import Path

import numpy as np

from compiler.place import PLACED, PlaceConfig, Problem, solve, validate
from compiler.place import pinned
from compiler.place.dump import from_dict

TILE = Path(__file__).resolve().parents[1] / "fixtures" / "place" / "so400m-27l-b6-f16-tile18.json"
# small budgets and no CP-SAT: the whole-tile search gives up in well under a second
QUICK = dict(cpsat_fallback=False, search_node_budget=256, canonical_node_budget=2000, portfolio=False)


def tile():
    return from_dict(json.loads(TILE.read_text()))[0]


def test_pinned_places_a_full_depth_batch_tile():
    p = tile()
    sol = solve(p, PlaceConfig(**QUICK))
    assert sol.status == PLACED and sol.method.startswith("pinned+"), sol
    assert validate(p, sol.addr) == []
    pins = pinned.whole_lifetime(p)
    assert len(pins) == 11 and all(p.names[i].endswith(".home@tile18") for i in pins)
    assert solve(p, PlaceConfig(pin_whole_lifetime=False, **QUICK)).status != PLACED


def test_pins_the_validator_refuses_fall_back_to_the_whole_tile(monkeypatch):
    """Fault: the residual forgets the pinned bytes, so its search places transients on the
    homes. The validator must refuse the merge; the tile is then searched whole."""
    real = pinned.residual

    def forgetful(p, addr):
        q, rest = real(p, addr)
        q.reserved = p.reserved
        return q, rest

    monkeypatch.setattr(pinned, "residual", forgetful)
    p = tile()
    sol = solve(p, PlaceConfig(**QUICK))
    assert not sol.method.startswith("pinned")
    assert sol.status != PLACED or validate(p, sol.addr) == []


def test_only_edge_free_whole_lifetime_requests_are_pinned():
    # 0: whole lifetime; 1: whole lifetime but bank-separated from 2; 2, 3: transients
    p = Problem(0, 4096, 8192, 1024, size=[512, 256, 256, 2048], align=[8] * 4,
                start=[0, 0, 1, 2], end=[4, 4, 3, 4], region=[0, 0, 0, 0], bank_edges=[[1, 2]])
    assert pinned.whole_lifetime(p).tolist() == [0]
    q, rest = pinned.residual(p, {0: 0})
    assert rest.tolist() == [1, 2, 3] and q.bank_edges.tolist() == [[0, 1]]
    assert q.reserved.tolist() == [[0, 512]]
    assert pinned.merged(p, {0: 0}, rest, [512, 768, 2048]) is None     # 1 and 2 share a bank unit
    assert pinned.merged(p, {0: 0}, rest, [512, 1024, 2048]).tolist() == [0, 512, 1024, 2048]

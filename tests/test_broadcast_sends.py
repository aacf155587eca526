"""policy.broadcast_sends: one exchange step's same source range to several tiles is one
multicast send (isa.MCAST), its sender charged once. End to end on the tiny target:
chosen plans validated by read-back and the exchange check with the flag on and off,
the simulator's cycles equal to expand's, and expand's grouping checked by brute force."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
import pytest

from compiler.expand import analysis
from compiler.phases import compile_trial, target_of
from helpers import target_cfg, trial_ok

VIT = dict(name="vit", preset="custom", width=128, hidden=256, heads=2, tokens=16, layers=2)


def cfg(fp8: bool = False, **policy):
    return dict(model=dict(VIT, fp8_activations=fp8), target=target_cfg("tiny"), policy=policy)


def brute_groups(x) -> dict:
    """Written from isa.MCAST's statement alone: rows of one step with the same source
    (tile, request, offset, row shape, relocation) go out as one send per distinct
    destination; a destination receiving the range again starts another send. Returns
    leader row -> sorted member rows."""
    seen = defaultdict(list)                  # source key -> list of groups (each: dsts, rows)
    for i in range(len(x["src"])):
        key = tuple(int(x[f][i]) for f in ("step", "src", "sreq", "soff", "s_row_bytes", "s_rows",
                                            "s_stride", "reloc"))
        for dsts, rows in seen[key]:
            if int(x["dst"][i]) not in dsts:
                dsts.add(int(x["dst"][i]))
                rows.append(i)
                break
        else:
            seen[key].append(({int(x["dst"][i])}, [i]))
    return {rows[0]: rows for groups in seen.values() for _, rows in groups}


@pytest.mark.parametrize("fp8", [False, True])
def test_validated_on_and_off_cycles_are_expands(fp8):
    on, off = compile_trial(cfg(fp8, broadcast_sends=True)), compile_trial(cfg(fp8, broadcast_sends=False))
    assert trial_ok(on) and trial_ok(off)
    for r in (on, off):
        assert r["run"].metrics()["exchanges_failed"] == 0
    tg = on["place"].tilegraph
    assert tg.bcast and not off["place"].tilegraph.bcast
    lead, k = analysis.multicast_lists(tg)
    assert len(lead) and k.max() >= 2, "the tiny ViT gathers blocks to several tiles: multicasts expected"
    # the same tile graph charged per pair: never cheaper, and dearer somewhere
    t = target_of(cfg(fp8))
    once, _ = analysis.step_cycles(tg, t)
    pair, _ = analysis.step_cycles(replace(tg, bcast=False), t)
    assert (once <= pair).all() and (once < pair).any()
    print("cycles on", on["run"].cycles, "off", off["run"].cycles, "per pair", int((pair * tg.step_runs()).sum()))


def test_send_leaders_match_brute_force():
    r = compile_trial(cfg(False, broadcast_sends=True))
    tg = r["place"].tilegraph
    lead = analysis.send_leaders(tg)
    want = brute_groups(tg.xfer)
    got = defaultdict(list)
    for i, l in enumerate(lead.tolist()):
        got[l].append(i)
    assert dict(got) == want
    assert sum(len(v) > 1 for v in want.values()) > 0


def test_send_leaders_random_rows_match_brute_force():
    """Random transfer rows with few distinct sources, so ranges repeat within a step and
    a tile often receives one range twice (a second group), against the brute force."""
    from types import SimpleNamespace

    class Graph(SimpleNamespace):       # a tile graph's stand-in (send_leaders keeps a weakref)
        pass
    rng = np.random.default_rng(7)
    n = 400
    x = {f: rng.integers(0, 3, n) for f in ("step", "src", "sreq", "soff", "s_row_bytes", "s_rows",
                                             "s_stride", "reloc")}
    x["soff"] = x["soff"] * 4
    x["reloc"] = np.where(rng.random(n) < 0.2, -64, 0)       # a negative word: not packed
    x["dst"] = rng.integers(0, 4, n)
    tg = Graph(xfer=x, bcast=True)
    got = defaultdict(list)
    for i, l in enumerate(analysis.send_leaders(tg).tolist()):
        got[l].append(i)
    want = brute_groups(x)
    assert dict(got) == want
    assert any(len(v) > 1 for v in want.values())
    twice = {(tuple(x[f][i] for f in x if f != "dst"), x["dst"][i]) for i in range(n)}
    assert len(twice) < n, "some tile should receive a range twice: the second-group path"
    x["dst"] = np.arange(n) % 97                                 # no tile receives a range twice: the fast path
    tg = Graph(xfer=x, bcast=True)
    got = defaultdict(list)
    for i, l in enumerate(analysis.send_leaders(tg).tolist()):
        got[l].append(i)
    assert dict(got) == brute_groups(x)

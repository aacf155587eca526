"""policy.balanced_homes (compiler/expand/balance.py): the home rotation also spreads
the vectors' replicated shard homes, starting from the ring / resident homes' load.
Brute force on the shard tiles, and a trial validated on the simulator with it on, its
fullest tile no fuller than without."""
from __future__ import annotations

import numpy as np

from compiler.expand.balance import vector_shards, vector_tiles
from compiler.expand.graph import home_rotations
from compiler.ir import Graph, Tensor
from compiler.phases import compile_trial
from helpers import target_cfg

VIT = dict(name="vit", preset="custom", width=128, hidden=256, heads=2, tokens=16, layers=2)


def _vectors(n: int, cols: int, T: int):
    g = Graph("vectors")
    for k in range(n):
        g.add(Tensor(f"v{k}", (1, cols), "f16", "param"))
    return g


def _holders(g, rots: dict, T: int) -> np.ndarray:
    """Vectors whose shards each tile holds, recomputed from vector_shards / vector_tiles."""
    per = np.zeros(T, np.int64)
    for name, t in g.tensors.items():
        cs, R = vector_shards(t.shape[1], 2, t.nbytes, T)
        tiles = np.unique(vector_tiles(len(cs), R, rots.get(name, 0), T))
        per[tiles] += 1
    return per


def test_vectors_spread_over_the_tiles():
    """Four vectors each on about half of 64 tiles: at rotation 0 every one sits on the
    same half (4 on a tile); balanced, no tile holds more than 2 and all tiles hold one."""
    T = 64
    g = _vectors(4, 256, T)
    names = list(g.tensors)
    off = home_rotations(g, names, set(), 1, T, {})
    on = home_rotations(g, names, set(), 1, T, {}, vectors=True, base=np.zeros(T, np.int64))
    assert _holders(g, off, T).max() == 4
    held = _holders(g, on, T)
    assert held.max() <= 2 and held.min() >= 1, held


def test_vectors_avoid_a_loaded_base():
    """A fixed load (ring homes) on the even tiles: one vector goes to the odd ones."""
    T = 64
    g = _vectors(1, 256, T)
    base = np.zeros(T, np.int64)
    base[::2] = 10_000
    rot = home_rotations(g, ["v0"], set(), 1, T, {}, vectors=True, base=base)["v0"]
    cs, R = vector_shards(256, 2, 512, T)
    assert (vector_tiles(len(cs), R, rot, T) % 2 == 1).all()


def cfg(**policy):
    return dict(model=VIT, target=target_cfg("tiny"), policy=dict(dict(weight_stationary=False), **policy))


def test_balanced_homes_validated_and_no_fuller():
    on, off = compile_trial(cfg()), compile_trial(cfg(balanced_homes=False))
    for r in (on, off):
        m = r["run"].metrics()
        assert r["report"].summary["status"] == "ok" and m["validated"] and m["ops_failed"] == 0
    fp = lambda r: int(r["expand"].finalists[0].analysis["footprint_bytes"].max())
    assert fp(on) <= fp(off)


def test_vector_rotation_against_every_roll():
    """expand/balance.py vector_rotation (every rotation at once, from the pattern's tiles)
    against a brute force over np.roll, where its candidates are every rotation (T < 128)."""
    from compiler.expand.balance import vector_rotation
    rng = np.random.default_rng(0)
    for _ in range(40):
        T = int(rng.integers(8, 120))
        load, per = rng.integers(0, 50, T), np.zeros(T, np.int64)
        per[rng.integers(0, T, T // 3)] = rng.integers(1, 40)
        key = lambda r: (int((load + np.roll(per, r)).max()), int(((load + np.roll(per, r)) ** 2).sum()), r)
        assert vector_rotation(load, per) == min(range(T), key=key)


def _vector_homes(r) -> dict:
    """Each [1, C] parameter's home: (its columns, the number of its home requests)."""
    res = r["expand"].finalists[0]
    tg, g = res.tilegraph, r["model"].graph
    out = {}
    for name, t in g.tensors.items():
        if t.kind == "param" and t.shape[0] == 1 and f"{name}.home" in tg.names:
            sel = tg.req["name"] == tg.names.index(f"{name}.home")
            out[name] = (t.shape[1], int(sel.sum()))
    return out


def test_single_vector_homes_hold_each_shard_once():
    """policy.single_vector_homes (on; with broadcast_sends a send to many tiles is one
    multicast): a vector's home is each 256-byte shard once, where replicas held each
    shard on ~T/2 / S tiles. Validated both ways; the fullest tile is no fuller and the
    program no longer: the replicas bought no exchange cycle."""
    on, off = compile_trial(cfg()), compile_trial(cfg(single_vector_homes=False))
    for r in (on, off):
        m = r["run"].metrics()
        assert r["report"].summary["status"] == "ok" and m["validated"] and m["ops_failed"] == 0
    vh_on, vh_off = _vector_homes(on), _vector_homes(off)
    assert vh_on and vh_on.keys() == vh_off.keys()
    for name, (cols, n) in vh_on.items():
        assert n == -(-cols * 2 // 256), (name, n)          # f16: 128 columns a shard
        assert vh_off[name][1] > n, (name, vh_off[name])      # replicated before
    fp = lambda r: int(r["expand"].finalists[0].analysis["footprint_bytes"].max())
    assert fp(on) <= fp(off)
    assert on["run"].metrics()["cycles"] <= off["run"].metrics()["cycles"]

"""Balanced homes (policy.balanced_homes): the home rotation (expand/graph.py
home_rotations) also places the vectors' replicated shard homes and counts the bytes
already fixed on each tile (resident weights, ring homes), so no tile holds every
vector.

Why: a vector home (graph.py vector_home) is R replicas of S shards spread evenly
over the tiles from its rotation, about half the tiles for each vector. Every vector
took rotation 0, so the same half of the tiles held the shards of all of them: at 27
So400m layers the 8 per-layer vectors are 27 members × 256 B = 6.9 KB each, 55 KB on
the fullest tile (experiments/comm/footprint.py) where spreading them takes ~28 KB.
Ring homes and resident weights are placed by their grids (not rotatable), so they
are the load the rotatable homes start from."""
from __future__ import annotations

import numpy as np

from ..plan.homes import VECTOR_SHARD


def vector_shards(cols: int, ebytes: int, nbytes: int, T: int, replicas: bool = True) -> tuple[np.ndarray, int]:
    """A [1, cols] vector's shard column starts and replica count R: each shard tile
    serves about as many bytes as a row tile receives (half the tiles consume it).
    Without `replicas` R = 1: where a send to many tiles is one multicast charged once
    (policy.broadcast_sends), a replica saves no exchange cycle and only takes memory
    (policy.single_vector_homes)."""
    cs = np.arange(0, cols, max(2, VECTOR_SHARD // ebytes))
    S = len(cs)
    R = int(min(max(1, -(-(T // 2) * VECTOR_SHARD // nbytes)), max(1, T // S))) if replicas else 1
    return cs, R


def vector_tiles(S: int, R: int, rot: int, T: int) -> np.ndarray:
    """Tiles [R, S] of a vector's shards from rotation `rot`: evenly spaced."""
    return (rot + (np.arange(R)[:, None] * S + np.arange(S)) * T // (R * S)) % T


def vector_replicas(policy) -> bool:
    """Whether vector homes are replicated: not where one multicast serves every
    consumer (policy.single_vector_homes with policy.broadcast_sends)."""
    return not (policy.single_vector_homes and policy.broadcast_sends)


def vector_load(t, count: int, T: int, replicas: bool = True) -> np.ndarray:
    """Bytes per tile of vector tensor t's home at rotation 0 (count members, each
    shard padded to 16 B as vector_home allocates it)."""
    e = t.nbytes // max(1, t.shape[1])
    cs, R = vector_shards(t.shape[1], e, t.nbytes, T, replicas)
    size = np.diff(np.append(cs, t.shape[1])) * e
    size = -(-size // 16) * 16 * count if count > 1 else size
    tiles = vector_tiles(len(cs), R, 0, T)
    return np.bincount(tiles.ravel(), np.tile(size, R), minlength=T).astype(np.int64)


def fixed_load(bld, T: int) -> np.ndarray:
    """Bytes per tile of the requests allocated so far (resident weights, ring homes),
    each its whole sequence extent."""
    if not bld.req:
        return np.zeros(T, np.int64)
    tile = np.concatenate([r["tile"] for r in bld.req])
    span = np.concatenate([r["stride"] * (r["count"] - 1) + r["size"] for r in bld.req])
    return np.bincount(tile, span, minlength=T).astype(np.int64)


def vector_rotation(load: np.ndarray, per: np.ndarray, candidates: int = 64) -> int:
    """The rotation r of a vector's home (`per`: its bytes per tile at rotation 0) that
    keeps the fullest tile of load + roll(per, r) lowest, ties to the evenest spread (the
    least sum of squares), then the least r. Rotations tried: `candidates` evenly spaced
    ones, each with the offsets up to the shards' spacing (a shard pattern ~2 tiles apart
    needs an odd rotation to sit between another's; every rotation cost 13 ms a vector at
    1472 tiles, ~8 s of expand at 27 layers). Since per >= 0 the fullest tile is the
    fuller of load's own and the pattern's tiles, and of the sum of squares only
    Σ load[tile] · per depends on r (exact integers: no BLAS)."""
    T = len(load)
    idx = np.flatnonzero(per)
    if not len(idx):
        return 0
    gap = -(-T // len(idx))
    rots = np.unique((np.arange(0, T, max(1, T // candidates))[:, None] + np.arange(gap)).ravel() % T)
    pv = per[idx]
    L = load[(idx[None, :] + rots[:, None]) % T]                   # [rotation, shard tile]
    top = np.maximum((L + pv).max(1), load.max())
    dot = (L * pv).sum(1)
    return int(rots[np.lexsort((rots, dot, top))[0]])

"""Homes as grids: where inputs and parameters live between uses, and in which element
order. Plan's estimates (memory, the beam's sender costs) and expand's layouts
(expand/graph.py) both read them from here.

Element orders (docs/architecture.md §8):
- row-major: a home of whole rows spread over the tiles (inputs, f16 weights, vectors);
- AMP micro-panel (isa.panel_order): a weight whose matmul reads its b operand as
  micro-panels (the target's amp_panel_elems: FP8) is stored in that order, so every
  gather moves whole panel spans. Its home is a grid of whole panel rows × column
  chunks over the tiles (a [K, N] weight has only ⌈K/32⌉ panel rows: whole panel rows
  alone would crowd it onto a few tiles). The host sends it rearranged, so neither the
  host nor an exchange permutes bytes. From a row-major home the same gather would be a
  byte-wise permutation (a 1-byte span per element): expand rejects that as unencodable
  (policy.panel_homes = false reproduces it);
- block-major: a resident (weight-stationary) weight, each tile holding its matmul's
  block contiguously, micro-panels inside (expand/matmul.py resident_weights).
"""
from __future__ import annotations

import numpy as np

from ..target import DTYPE_BYTES, Target

VECTOR_SHARD = 256   # bytes per shard of a vector home (expand/graph.py vector_home)


def starts(n: int, parts: int) -> np.ndarray:
    """Even partition of n into at most `parts` non-empty blocks."""
    b = -(-n // max(1, min(parts, n)))
    return np.arange(0, n, b, dtype=np.int64)


def spread(n: int, T: int) -> np.ndarray:
    """n blocks on n distinct tiles evenly spaced over all T: one block per tile, so a
    gather's send bytes are balanced over the holders (each tile sends at its own
    4 B/cycle: spacing buys no bandwidth, docs/architecture.md §2) and the homes of different
    tensors, rotated, spread their memory over the whole machine."""
    return np.arange(n) * T // max(n, 1)


def panel_elems(t: Target, dtype: str) -> int:
    """Micro-panel height the AMP reads a b operand of `dtype` in (0: any order)."""
    return int(t.amp_panel_elems.get(dtype, 0))


def panel_weights(graph, t: Target, enabled: bool = True) -> dict[str, int]:
    """Parameters stored in AMP micro-panel order: weight -> panel height. Those read
    only as the (untransposed) b operand of matmuls whose AMP needs panels."""
    if not enabled:
        return {}
    need, other = {}, set()
    for op in graph.ops:
        for k, x in enumerate(op.inputs):
            P = panel_elems(t, graph.tensors[x].dtype)
            if op.kind == "matmul" and k == 1 and P and not op.attr("transpose_b", False):
                need[x] = P
            else:
                other.add(x)
    return {x: P for x, P in need.items() if graph.tensors[x].kind == "param" and x not in other}


def home_grid(rows: int, cols: int, T: int, P: int = 0):
    """A home's blocks: row starts, column starts and (unrotated) tiles, block-row-major.
    Row-major (P = 0): whole rows over all tiles. Micro-panel order: whole panel rows,
    each cut into column chunks so that the blocks use the tiles (each block then holds
    whole panel spans: [columns][P] per panel row)."""
    if not P:
        rs, cs = starts(rows, T), np.zeros(1, np.int64)
    else:   # u panel rows per block: the least largest block, then the fewest blocks
        npanel = -(-rows // P)
        u = np.arange(-(-npanel // T), npanel + 1)
        chunks = np.minimum(cols, T // -(-npanel // u))
        u = int(u[np.argmin(u * P * -(-cols // chunks))])
        rs = np.arange(0, rows, u * P, dtype=np.int64)
        cs = starts(cols, T // len(rs))
    return rs, cs, spread(len(rs) * len(cs), T).reshape(len(rs), len(cs))


def home_blocks(rows: int, cols: int, ebytes: int, T: int, P: int = 0):
    """The home's blocks as flat arrays (r0, nr, c0, nc, tile) and their bytes."""
    rs, cs, tile = home_grid(rows, cols, T, P)
    nr, nc = np.diff(np.append(rs, rows)), np.diff(np.append(cs, cols))
    R, C = (x.ravel() for x in np.meshgrid(np.arange(len(rs)), np.arange(len(cs)), indexing="ij"))
    blocks = (rs[R], nr[R], cs[C], nc[C], tile.ravel())
    return blocks, nr[R] * nc[C] * ebytes


def home_bytes(graph, t: Target, panels: dict, vector_homes: bool = True, over: int = 0) -> int:
    """Bytes of input and parameter homes on the fullest tile (each tensor's largest
    block, summed: an upper bound rotation only improves). A Repeat sequence's home
    holds all its members in each block (count × the block: 27 So400m layers' FP8
    weights are ~290 KB of every tile, which a grid's memory screen must see); with
    policy.vector_homes a [1, C] parameter sits in replicated shards of at most
    VECTOR_SHARD bytes, one per tile (expand/graph.py vector_home). With `over`, only the
    homes whose block (a sequence's: all its members) is larger than that count: plan's
    region-1 screen (plan/matmul.py) passes region 0's size, as region 0 cannot hold them."""
    count = graph.repeat.count if graph.repeat else 1
    seq = set(graph.repeat.sequences) if graph.repeat else set()
    total = 0
    for x in graph.tensors.values():
        if x.kind in ("input", "param"):
            if vector_homes and x.kind == "param" and x.shape[0] == 1:
                block = -(-min(x.nbytes, VECTOR_SHARD) // 16) * 16
            else:
                _, size = home_blocks(*x.shape, DTYPE_BYTES[x.dtype], t.tiles, panels.get(x.name, 0))
                block = int(size.max())
            block *= count if x.name in seq else 1
            total += block if block > over else 0
    return total

"""`pin_whole_lifetime`: after every greedy order failed, fix first the requests live
at every event of the tile (weight homes, resident sequences: live from the first
event to the last), largest first at the lowest legal address, as the end-first
greedy order does; then hand the rest to the search as a smaller tile whose
reserved ranges include the pinned bytes.

Why: a tile's whole-lifetime requests cross every time section, so the full
problem never splits into parts (`instance.parts`) and the searches branch over
the homes' addresses together with every transient buffer's. Fixed, they leave the
transients' problem, which falls apart into the layer's time sections. On the
27-layer f16 batch-6 plans, tiles holding ~300 KB of homes and 158 KB A blocks that
took CP-SAT 30-277 s (or ended `unknown` under the phase's budgets) place this way
in 0.01-0.05 s (experiments/throughput/README.md).

Not complete: pinning may choose homes' addresses no placement of the rest can
live with; the caller then searches the whole tile as before. Only requests without
bank edges are pinned (a reserved range carries no bank separation), and the
merged placement is checked by the independent validator before it is returned.
"""
from __future__ import annotations

import numpy as np

from . import greedy
from .instance import Instance
from .problem import Problem
from .validate import validate


def whole_lifetime(p: Problem) -> np.ndarray:
    """Requests live at every event of the tile and joined to nothing by a bank edge,
    largest extent first (index order among equals)."""
    if not len(p):
        return np.zeros(0, np.int64)
    edged = np.zeros(len(p), bool)
    edged[p.bank_edges.ravel()] = True
    idx = np.flatnonzero((p.start <= p.start.min()) & (p.end >= p.end.max()) & ~edged)
    return idx[np.argsort(-p.extent[idx], kind="stable")]


def residual(p: Problem, addr: dict) -> tuple[Problem, np.ndarray]:
    """The tile without the pinned requests, their bytes reserved; and the rest's
    original indices (request k of the residual is request rest[k] of `p`)."""
    keep = np.ones(len(p), bool)
    keep[list(addr)] = False
    rest = np.flatnonzero(keep)
    pos = np.full(len(p), -1, np.int64)
    pos[rest] = np.arange(len(rest))
    e = pos[p.bank_edges].reshape(-1, 2) if len(p.bank_edges) else p.bank_edges
    held = np.array([(a, a + int(p.extent[i])) for i, a in addr.items()], np.int64).reshape(-1, 2)
    q = Problem(p.memory_base, p.region0_end, p.memory_end, p.element_bytes,
                size=p.size[rest], align=p.align[rest], start=p.start[rest], end=p.end[rest],
                region=p.region[rest], count=p.count[rest], stride=p.stride[rest],
                bank_edges=e, reserved=np.concatenate([p.reserved, held]),
                names=[p.names[i] for i in rest] if p.names else None, max_alloc=p.max_alloc)
    return q, rest


def pin(p: Problem, inst: Instance) -> dict | None:
    """{request: address} of the whole-lifetime requests, first fit largest first;
    None when there are none, all are (nothing left to search) or they do not fit."""
    idx = whole_lifetime(p)
    if not 0 < len(idx) < len(p):
        return None
    a, failed = greedy.place_order(inst, idx.tolist())
    return None if failed >= 0 else {int(i): int(a[i]) for i in idx}


def merged(p: Problem, addr: dict, rest: np.ndarray, rest_addr) -> np.ndarray | None:
    """The whole tile's addresses, or None when the independent validator refuses them
    (e.g. a bank-separated sequence sharing a unit with a pinned request)."""
    out = np.full(len(p), -1, np.int64)
    out[list(addr)] = list(addr.values())
    out[rest] = np.asarray(rest_addr, np.int64)
    return None if validate(p, out) else out

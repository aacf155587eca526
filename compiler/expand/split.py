"""Split gathers (policy.split_gathers): a B gather's transfers spread over several
earlier exchange steps, each part into room those steps already have.

An exchange step lasts as long as its busiest sender or receiver (target.exchange_cycles),
so every other tile has room in it: W - own bytes, W the busiest tile's bytes. At 27
layers (weights in ring homes) fc1's and fc2's B gathers fill ~100 KB on every grid tile
in their own step, too much to move whole to any earlier step (early.py finds no gain),
while the ten-odd short steps between the layer's start and them leave each tile tens of
KB of room (experiments/comm/README.md, split.py's table).

After early_gathers, each recorded gather (expand/matmul.py, graph.py: its transfer rows,
destination requests, step, ready step) is cut into units: a multicast group (the rows
of one send entry, analysis.send_leaders: its sender charged once wherever it goes) or,
without tg.bcast, a row. Earlier exchange steps are tried latest first (shorter buffer
lifetimes); in each, the units whose every row still fits the step's room on its sender
and receivers, counting the units before them in index order (deterministic), move
there: nothing lengthens. A gather whose own step does not get shorter is put back
(a longer lifetime for nothing). The destination requests then
live from the earliest step a part moved to: expand's memory screens judge that as any
other layout, and the simulator runs the moved transfers as any other."""
from __future__ import annotations

import numpy as np

from .analysis import send_charge, send_leaders

ROUNDS = 8      # fit passes per step: each drops the units that can no longer fit alone


def split_gathers(tg, movable: list, t, reach: int = 0) -> int:
    """Split the gathers of `movable` over earlier exchange steps in place in tg (only
    steps at most `reach` exchange steps before the gather's, 0 = any); returns how
    many transfer rows moved."""
    x, T = tg.xfer, tg.tiles
    if not len(x["step"]):
        return 0
    nb = x["s_row_bytes"] * x["s_rows"]
    ch = send_charge(tg)
    lead = send_leaders(tg)
    size = np.bincount(lead, minlength=len(lead))    # rows per multicast group, by its leader
    exchange = [s + 1 for s, k in enumerate(tg.steps) if k == "exchange"]
    load = {}

    def sides(s):
        if s not in load:
            sel = x["step"] == s
            load[s] = (_sum(x["src"][sel], ch[sel], T), _sum(x["dst"][sel], nb[sel], T))
        return load[s]

    moved = 0
    for r0, r1, dst, _, ready in movable:
        if r1 <= r0:
            continue
        step = int(x["step"][r0])                 # where it is now (early_gathers may have moved it)
        rows = np.arange(r0, r1)
        rows = rows[x["step"][rows] == step]
        # units: multicast groups wholly inside the gather (else a row would be charged twice)
        inside = np.bincount(lead[rows], minlength=len(lead))
        rows = rows[inside[lead[rows]] == size[lead[rows]]]
        if not len(rows) or int((x["step"] == step).sum()) == len(rows):
            continue                              # never leave a step empty
        _, unit = np.unique(lead[rows], return_inverse=True)
        cands = [y for y in exchange if ready < y < step]
        if reach:
            cands = cands[-reach:]
        snd, rcv = sides(step)
        before = t.exchange_cycles(snd, rcv)
        where = np.full(len(rows), step, np.int64)
        todo = np.ones(len(rows), bool)
        for y in reversed(cands):
            ys, yr = sides(y)
            W = max(int(ys.max(initial=0)), int(yr.max(initial=0)))
            for _ in range(ROUNDS):
                acc = _fit(x, rows, unit, todo, nb, ch, ys, yr, W)
                if not acc.any():
                    break
                r = rows[acc]
                ys += _sum(x["src"][r], ch[r], T)
                yr += _sum(x["dst"][r], nb[r], T)
                where[acc], todo[acc] = y, False
            if not todo.any():
                break
        go = where != step
        if not go.any():
            continue
        r = rows[go]
        gs = _sum(x["src"][r], ch[r], T)
        gr = _sum(x["dst"][r], nb[r], T)
        if t.exchange_cycles(snd - gs, rcv - gr) >= before:        # no gain: put back
            for y in np.unique(where[go]):
                q = rows[where == y]
                ys, yr = sides(int(y))
                ys -= _sum(x["src"][q], ch[q], T)
                yr -= _sum(x["dst"][q], nb[q], T)
            continue
        snd -= gs
        rcv -= gr
        x["step"][r] = where[go]
        np.minimum.at(tg.req["start"], x["dreq"][r], where[go])
        moved += len(r)
    return moved


def _fit(x, rows, unit, todo, nb, ch, ys, yr, W) -> np.ndarray:
    """Rows (of `rows`, still `todo`) whose unit fits in room W - load on every sender and
    receiver, counting the fitting units before them in index order."""
    n = int(unit.max()) + 1
    alone = (yr[x["dst"][rows]] + nb[rows] <= W) & (ys[x["src"][rows]] + ch[rows] <= W)
    bad = np.bincount(unit, ~(alone & todo), minlength=n) > 0      # a unit moves whole
    live = ~bad[unit]
    idx = np.flatnonzero(live)
    if not len(idx):
        return live
    r = rows[idx]
    ok = (yr[x["dst"][r]] + _prefix(x["dst"][r], nb[r]) <= W) & (ys[x["src"][r]] + _prefix(x["src"][r], ch[r]) <= W)
    fail = np.zeros(len(rows), bool)
    fail[idx[~ok]] = True
    return live & ~(np.bincount(unit, fail, minlength=n) > 0)[unit]


def _sum(tiles, val, T) -> np.ndarray:
    """Per tile: the int64 sum of `val` over the rows on it."""
    return np.bincount(tiles, val, minlength=T).astype(np.int64)     # exact: sums far below 2^53


def _prefix(key, val) -> np.ndarray:
    """Per element: the sum of `val` over elements with the same key up to it (inclusive),
    in index order."""
    o = np.argsort(key, kind="stable")
    c = np.cumsum(val[o])
    k = key[o]
    start = np.r_[True, k[1:] != k[:-1]]
    base = np.maximum.accumulate(np.where(start, np.arange(len(k)), 0))
    out = np.empty_like(c)
    out[o] = c - np.r_[0, c][base]
    return out

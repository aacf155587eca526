"""Early gathers (policy.early_gathers): a matmul's B operand (and a bias's slices, a
LayerNorm's gamma and beta) gathered in an earlier exchange superstep that has room.

An exchange superstep lasts as long as its busiest tile, sending or receiving
(docs/architecture.md §2), so most steps leave bandwidth unused on most tiles: the
scores' gather of q and k is bound by the 2/3 of the qkv tiles holding them, while the
tiles holding v send nothing; the attention's gather of the probabilities and v then
piles v's sends onto tiles already sending probabilities. A B operand is ready long
before its matmul (a weight any time in the layer, v as soon as qkv is), so its
transfers can move to an earlier exchange step where they lengthen nothing.

After the tile graph is built, each recorded B gather (expand/matmul.py: its transfer
rows, destination requests, its step and the step after which its source is complete
and inside the same Repeat body) moves to the exchange step between the two that
shortens the program most (never emptying a step: it would still cost its phase and
sync), judged exactly per tile (target.exchange_cycles: the
phase's busiest sender or receiver) with the steps as every earlier move left them;
none when no step gains. The destination buffer then lives from that step: expand's
memory screen sees it. With `fit` (policy.early_fit) a move is taken only where every
tile it lengthens a buffer on stays within the tile by that screen's own figures (live
bytes and support, as before the moves), else the next best step: at 27 layers the FP8
batch of 8 was rejected 13,406 B short with every move and fits with them where they fit
(experiments/throughput). Without it a move that does not fit rejects the candidate like
any other layout. The simulator runs the moved transfers as any other. With tg.bcast the
sends are charged as analysis.send_charge states them before any move (a multicast
group's bytes once): an estimate for choosing, the moved graph's exact cycles are
analysis.step_cycles'."""
from __future__ import annotations

import numpy as np

from .analysis import _span, live_bytes, send_charge, support_bytes


def early_gathers(tg, movable: list, t, fit: bool = False) -> int:
    """Move the gathers of `movable` (xfer row range r0..r1, destination request rows,
    step, ready step) in place in tg; returns how many moved."""
    x, T, r = tg.xfer, tg.tiles, tg.req
    if fit:
        live, size, room, steps0 = live_bytes(tg), _span(r), [], x["step"].copy()
        peak = live.max(1)

    def support():
        """support_bytes as before the moves (asked once, only when a move grows a peak)."""
        now = x["step"].copy()
        x["step"][:] = steps0
        try:
            return support_bytes(tg)
        finally:
            x["step"][:] = now

    def lengthen(dst, y):
        """The tiles a move to step y lengthens buffers on and their live bytes after it;
        (None, None): nothing to track (fit off, or no buffer lengthened); (None, False):
        it does not fit."""
        if not fit:
            return None, None
        d = dst[r["start"][dst] > y]
        if not len(d):
            return None, None
        u, inv = np.unique(r["tile"][d], return_inverse=True)
        add = np.zeros((len(u), live.shape[1]), np.int64)
        np.add.at(add, (inv.ravel(), y), size[d])
        np.add.at(add, (inv.ravel(), r["start"][d]), -size[d])
        after = live[u] + np.cumsum(add, axis=1)
        top = after.max(1)
        if (top <= peak[u]).all():                  # no peak grows: nothing to check
            return u, after
        if not room:                                # a tile over already may not grow
            room.append(np.maximum(t.tile_bytes - support(), peak))
        return (u, after) if (top <= room[0][u]).all() else (None, False)
    nb = x["s_row_bytes"] * x["s_rows"]
    ch = send_charge(tg)                      # what each row costs its sender
    exchange = [s + 1 for s, k in enumerate(tg.steps) if k == "exchange"]
    load = {}

    def sides(s):
        if s not in load:
            sel = x["step"] == s
            load[s] = (np.bincount(x["src"][sel], ch[sel], minlength=T).astype(np.int64),
                       np.bincount(x["dst"][sel], nb[sel], minlength=T).astype(np.int64))
        return load[s]

    cost = lambda snd, rcv: t.exchange_cycles(snd, rcv)
    moved = 0
    for r0, r1, dst, step, ready in movable:
        if r1 <= r0 or int((x["step"] == step).sum()) == r1 - r0:
            continue                          # nothing, or all its step has: never leave a step empty
        gs = np.bincount(x["src"][r0:r1], ch[r0:r1], minlength=T).astype(np.int64)
        gr = np.bincount(x["dst"][r0:r1], nb[r0:r1], minlength=T).astype(np.int64)
        snd, rcv = sides(step)
        saved = cost(snd, rcv) - cost(snd - gs, rcv - gr)
        gains = []
        for y in reversed([s for s in exchange if ready < s < step]):     # latest first: shorter lifetimes
            ys, yr = sides(y)
            gains.append((saved - (cost(ys + gs, yr + gr) - cost(ys, yr)), y))
        best = None
        for g, y in sorted(gains, key=lambda gy: -gy[0]):                # stable: latest first among equals
            if g <= 0:
                break
            u, after = lengthen(dst, y)
            if after is not False:
                best = y
                break
        if best is None:
            continue
        if u is not None:
            live[u] = after
            peak[u] = after.max(1)
        x["step"][r0:r1] = best
        load[step] = (snd - gs, rcv - gr)
        ys, yr = sides(best)
        load[best] = (ys + gs, yr + gr)
        tg.req["start"][dst] = np.minimum(tg.req["start"][dst], best)
        moved += 1
    return moved

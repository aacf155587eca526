"""The spatial pipeline on one chip (issue #27, compiler/plan/pipeline.py): G groups of
tiles, group k holding layers [k n, (k+1) n) of the encoder with their weights, images
streaming through. This module builds the chip's tile graph from the G groups' own tile
graphs (each expanded on a target of its own tiles from compiler/pod/split.chip_model: group 0 with
the patch embedding, group G-1 with the final norm and head); place, schedule and lower
then treat it like any other.

One pipeline step is the chip's whole superstep sequence, run `items` times by an outer
REPEAT (tg.outer); in step s group k works on item s - k:

  1               HOST: group 0's tiles read item s of the image stream (sin rows)
  2 .. P+1        the groups' supersteps before their Repeat (group 0's patch embedding)
  P+2 .. P+B+1    the layer Repeat, one body for all groups (same count)
  .. P+B+E+1      the supersteps after the Repeat (group G-1's head)
                  In each of the three, the groups' own supersteps are merged in order
                  (`align`: kinds agree where they share one, least summed cycles); a
                  group's tiles SYNC through the others'.
  P+B+E+2         HOST: group G-1's tiles write output item s (sout rows)
  P+B+E+3         the shift: each group's carried output `y` to group k+1's input `x`,
                  rectangle by rectangle from the two groups' own host rows of y and x
                  (an exchange reads every source before writing: in place is fine)

The host pads the image stream with G - 1 items and drops the first G - 1 outputs: fill
and drain are the (items + G - 1) steps. Group k's x is live over the whole program (it
crosses the outer loop); y and the outputs only until the shift and the HOST out read them.
Group k's streams are named "g<k>/<name>" (its layers' weights); the image input and the
outputs keep the model's names and hold `items` items each. Nothing here reads data."""
from __future__ import annotations

import numpy as np

from .tilegraph import BSEG, DUMP, HOST, HSTEP, KERN, REQ, XFER, TileGraph, soa


def _host_rects(h: dict, sel: np.ndarray, row_bytes: int):
    """Host rows (sel) of a [rows, row_bytes] tensor as rectangles: first row, rows, first
    byte, bytes; each row's host_stride must be the tensor's row (or the row single)."""
    off, n, w, hs = h["host_off"][sel], h["rows"][sel], h["row_bytes"][sel], h["host_stride"][sel]
    if ((n > 1) & (hs != row_bytes)).any() or ((off % row_bytes) + w > row_bytes).any():
        raise ValueError("pipeline shift: a host row of the carried activation is not a rectangle of its rows")
    return off // row_bytes, n, off % row_bytes, w


def shift_rows(a: TileGraph, s_sel, s_tile0: int, b: TileGraph, d_sel, d_tile0: int, row_bytes: int, roff: tuple):
    """XFER rows moving every byte of the carried tensor from its blocks on one group (a's
    hout rows s_sel, its tiles from s_tile0) to its blocks on the next (b's hin rows d_sel):
    the intersections of their rectangles. roff: both groups' request row offsets."""
    src, dst = {**a.hout, "tile": a.req["tile"][a.hout["req"]]}, {**b.hin, "tile": b.req["tile"][b.hin["req"]]}
    sr, sn, sc, sw = _host_rects(src, s_sel, row_bytes)
    dr, dn, dc, dw = _host_rects(dst, d_sel, row_bytes)
    si, di = np.flatnonzero(s_sel), np.flatnonzero(d_sel)
    out = []
    for j in range(len(si)):              # blocks of the sender: a few per tile
        r0, r1 = np.maximum(sr[j], dr), np.minimum(sr[j] + sn[j], dr + dn)
        c0, c1 = np.maximum(sc[j], dc), np.minimum(sc[j] + sw[j], dc + dw)
        hit = np.flatnonzero((r1 > r0) & (c1 > c0))
        for i in hit:
            s, d = si[j], di[i]
            out.append((0, src["tile"][s] + s_tile0, dst["tile"][d] + d_tile0,
                        src["req"][s] + roff[0], src["off"][s] + (r0[i] - sr[j]) * src["tile_stride"][s] + c0[i] - sc[j],
                        dst["req"][d] + roff[1], dst["off"][d] + (r0[i] - dr[i]) * dst["tile_stride"][d] + c0[i] - dc[i],
                        c1[i] - c0[i], r1[i] - r0[i], src["tile_stride"][s],
                        c1[i] - c0[i], r1[i] - r0[i], dst["tile_stride"][d], 0))
    got = sum((r[7] * r[8]) for r in out)
    want = int((src["row_bytes"][s_sel] * src["rows"][s_sel]).sum())
    if got != want or want != int((dst["row_bytes"][d_sel] * dst["rows"][d_sel]).sum()):
        raise ValueError(f"pipeline shift: the groups' blocks of the carried activation cover {got} B "
                         f"of {want} B")
    return soa(XFER, out)


def align(seqs: list) -> tuple[list, list]:
    """One superstep sequence for several groups' (seqs: per group its (kind, cycles) in
    order): each group's steps keep their order, steps sharing a chip superstep have one
    kind, and the sum over chip supersteps of the slowest group's cycles (a group not in a
    superstep waits at its SYNC) is least for two groups; more are merged one at a time
    into the sequence so far, each merge by that dynamic programme. Returns the kinds and,
    per group, each step's chip superstep index."""
    kinds, cost, at = [k for k, _ in seqs[0]], [c for _, c in seqs[0]], [list(range(len(seqs[0])))]
    for seq in seqs[1:]:
        n, m = len(kinds), len(seq)
        big = np.iinfo(np.int64).max // 4
        dp = np.full((n + 1, m + 1), big, np.int64)
        dp[0, 0] = 0
        both = lambda i, j: kinds[i - 1] == seq[j - 1][0]
        for i in range(n + 1):
            for j in range(m + 1):
                if i and j and both(i, j):
                    dp[i, j] = min(dp[i, j], dp[i - 1, j - 1] + max(cost[i - 1], seq[j - 1][1]))
                if i:
                    dp[i, j] = min(dp[i, j], dp[i - 1, j] + cost[i - 1])
                if j:
                    dp[i, j] = min(dp[i, j], dp[i, j - 1] + seq[j - 1][1])
        pairs, i, j = [], n, m
        while i or j:
            if i and j and both(i, j) and dp[i, j] == dp[i - 1, j - 1] + max(cost[i - 1], seq[j - 1][1]):
                pairs.append((i - 1, j - 1))
                i, j = i - 1, j - 1
            elif i and dp[i, j] == dp[i - 1, j] + cost[i - 1]:
                pairs.append((i - 1, None))
                i -= 1
            else:
                pairs.append((None, j - 1))
                j -= 1
        pairs.reverse()
        old = {a: p for p, (a, _) in enumerate(pairs) if a is not None}
        at = [[old[a] for a in row] for row in at] + [[p for p, (_, b) in enumerate(pairs) if b is not None]]
        kinds = [kinds[a] if a is not None else seq[b][0] for a, b in pairs]
        cost = [max(cost[a] if a is not None else 0, seq[b][1] if b is not None else 0) for a, b in pairs]
    return kinds, at


def _events(steps: int, k: int, regions: list, S: int) -> np.ndarray:
    """Group k's event -> the chip's: 0 (host in) stays, its supersteps go where the
    alignment of each region put them (after the chip's HOST superstep), its host-out
    event and END to the chip's."""
    ev = np.arange(steps + 3)
    base = 2
    for spans, (merged, at) in regions:
        a, z = spans[k]
        ev[1 + a:1 + z] = base + np.asarray(at[k], np.int64)
        base += len(merged)
    ev[steps + 1], ev[steps + 2] = S + 1, S + 2
    return ev


def _host_steps(cat: dict, sizes: tuple, at: tuple) -> list:
    """HSTEP rows: one HOST per (tile, stream) in the stepped rows, which are sorted here by
    tile then stream so each HOST names a contiguous range; relocated by the stream's item."""
    out = []
    for d, rows in enumerate((cat["sin"], cat["sout"])):
        tile = cat["req"]["tile"][rows["req"]]
        order = np.lexsort((rows["stream"], tile))
        for f in rows:
            rows[f] = rows[f][order]
        n = len(sizes[d])
        u, first, cnt = np.unique(tile[order] * n + rows["stream"], return_index=True, return_counts=True)
        out += [(at[d], q // n, d, f0, c, sizes[d][q % n]) for q, f0, c in zip(u, first, cnt)]
    return out


def _take_host(h: dict, sel: np.ndarray, roff: int, stream: np.ndarray) -> dict:
    out = {f: h[f][sel].copy() for f in HOST}
    out["req"] += roff
    out["stream"] = stream
    return out


def merge(groups: list[TileGraph], tiles: int, items: int, image: str, x: str, y: str,
          image_bytes: int, out_bytes: dict, row_bytes: int, op_base: list, label: str = "") -> TileGraph:
    """The chip's tile graph (`tiles` tiles) from the groups' (group k on its own g.tiles tiles,
    after the groups before it: tiles [off_k, off_k + g_k.tiles)). image: group 0's input stream (one item, image_bytes); x, y: the
    Repeat's carried input and output (row_bytes a row); out_bytes: group G-1's output
    streams and their bytes an item; op_base: per group, the whole model's index of its op 0
    (the chip's step_op, for the profile)."""
    G, off = len(groups), np.cumsum([0] + [g.tiles for g in groups])
    if G < 2 or off[-1] > tiles:
        raise ValueError(f"pipeline: {G} groups of {', '.join(str(g.tiles) for g in groups)} tiles on a "
                         f"{tiles}-tile chip")
    if len({g.count for g in groups}) > 1:
        raise ValueError("pipeline: the groups' Repeats differ in count (" +
                         ", ".join(f"group {k}: {g.count}" for k, g in enumerate(groups)) + ")")
    body = [g.body_steps() for g in groups]
    regions = []                                   # before the Repeat, its body, after it
    for lo, hi in ((lambda g, b: 0, lambda g, b: b[0]), (lambda g, b: b[0], lambda g, b: b[1]),
                   (lambda g, b: b[1], lambda g, b: len(g.steps))):
        spans = [(lo(g, b), hi(g, b)) for g, b in zip(groups, body)]
        regions.append((spans, align([[(g.steps[i], int(g.analysis["step_cycles"][i])) for i in range(a, z)]
                                      for g, (a, z) in zip(groups, spans)])))
    (_, (pro, _)), (_, (mid, _)), (_, (epi, _)) = regions
    P, B, E = len(pro), len(mid), len(epi)
    S = P + B + E + 3
    host_out, shift = S - 1, S
    steps = ["host"] + pro + mid + epi + ["host", "exchange"]
    names, in_streams, panels = [], [image], {}
    parts = {f: [] for f in ("req", "kern", "xfer", "hin", "bseg", "sin", "sout", "dump")}
    scale, seqs, bank, step_op = [], [], [], [-1] * S
    roffs, roff, koff = [], 0, 0
    out_names = list(groups[-1].out_streams)
    for k, g in enumerate(groups):
        ev = _events(len(g.steps), k, regions, S)
        names += g.names                               # labels only: groups sit on different tiles
        r = {f: g.req[f].copy() for f in REQ}
        r["tile"] += off[k]
        r["name"] += len(names) - len(g.names)
        r["start"], r["end"] = ev[r["start"]], ev[r["end"]]
        h_in, h_out = g.hin, g.hout
        sname = lambda n: f"g{k}/{n}"
        xin = np.asarray(g.in_streams)[h_in["stream"]] == x if len(h_in["stream"]) else np.zeros(0, bool)
        r["end"][h_in["req"][xin]] = S + 2             # x crosses the outer loop
        yout = np.asarray(list(g.out_streams))[h_out["stream"]] if len(h_out["stream"]) else np.zeros(0, str)
        last = host_out if k == G - 1 else shift       # y and outputs: until the shift / HOST out reads them
        keep = np.isin(h_out["req"], h_in["req"][xin])
        np.minimum.at(r["end"], h_out["req"][~keep], last + 1)
        parts["req"].append(r)
        kr = {f: g.kern[f].copy() for f in KERN}
        kr["tile"] += off[k]
        kr["step"] = ev[kr["step"]]
        for f in ("r0", "r1", "r2", "r3"):
            kr[f] = np.where(kr[f] >= 0, kr[f] + roff, kr[f])
        kr["sseq"] = np.where(kr["sseq"] != 0, kr["sseq"] + len(seqs), 0)
        parts["kern"].append(kr)
        scale.append(g.scale)
        seqs += list(g.scale_seqs)
        xr = {f: g.xfer[f].copy() for f in XFER}
        xr["step"] = ev[xr["step"]]
        xr["src"] += off[k]
        xr["dst"] += off[k]
        xr["sreq"] += roff
        xr["dreq"] += roff
        parts["xfer"].append(xr)
        d = {f: np.asarray((g.dump or soa(DUMP))[f], np.int64) for f in DUMP}   # op outputs, read back
        d["tile"], d["req"], d["step"] = d["tile"] + off[k], d["req"] + roff, ev[d["step"]]
        d["group"] = np.full(len(d["op"]), k, np.int64)           # op: the group's own graph's index
        parts["dump"].append(d)
        b = {f: g.bseg[f].copy() for f in BSEG}
        b["kern"] += koff
        b["req"] += roff
        parts["bseg"].append(b)
        bank.append(g.bank + roff)
        # host rows: the image in (group 0) and the outputs out (group G-1) become stepped rows
        own = np.asarray(g.in_streams)[h_in["stream"]] if len(h_in["stream"]) else np.zeros(0, str)
        for n in g.in_streams:
            if not (k == 0 and n == image):
                in_streams.append(sname(n))
                if n in g.in_panels:
                    panels[sname(n)] = g.in_panels[n]
        idx = {n: in_streams.index(n if (k == 0 and n == image) else sname(n)) for n in g.in_streams}
        stream = np.array([idx[n] for n in own], np.int64)
        step_rows = (own == image) if k == 0 else np.zeros(len(own), bool)
        parts["hin"].append(_take_host(h_in, ~step_rows, roff, stream[~step_rows]))
        if k == 0:
            if image in g.in_panels:
                raise ValueError(f"pipeline: the image stream {image!r} is sent in panel order")
            parts["sin"].append(_take_host(h_in, step_rows, roff, stream[step_rows]))
        if k == G - 1:
            so = np.array([out_names.index(n) for n in yout], np.int64)
            parts["sout"].append(_take_host(h_out, np.ones(len(yout), bool), roff, so))
        for st, op in enumerate(g.step_op):             # the first group opening a chip superstep names it
            if step_op[ev[st + 1] - 1] < 0:
                step_op[ev[st + 1] - 1] = op + op_base[k]
        roffs.append(roff)
        roff += len(r["tile"])
        koff += len(kr["tile"])
    # the shift: y of group k into x of group k + 1
    for k in range(G - 1):
        a, b = groups[k], groups[k + 1]
        ys = np.asarray(list(a.out_streams))[a.hout["stream"]] == y
        xs = np.asarray(b.in_streams)[b.hin["stream"]] == x
        xr = shift_rows(a, ys, off[k], b, xs, off[k + 1], row_bytes, (roffs[k], roffs[k + 1]))
        xr["step"][:] = shift
        parts["xfer"].append(xr)
    cat = {f: {c: np.concatenate([p[c] for p in parts[f]]).astype(np.int64) for c in parts[f][0]} for f in parts}
    hstep = _host_steps(cat, ([image_bytes], [out_bytes[n] for n in out_names]), (1, host_out))
    body0 = 1 + P                                  # 0-based: after the HOST and the prologue
    tg = TileGraph(tiles=tiles, steps=steps, names=names, req=cat["req"], bank=np.concatenate(bank).reshape(-1, 2),
                   kern=cat["kern"], scale=np.concatenate(scale), xfer=cat["xfer"], hin=cat["hin"],
                   hout=soa(HOST), in_streams=in_streams,
                   out_streams={n: items * out_bytes[n] for n in out_names}, label=label or f"pipeline G={G}",
                   in_panels=panels, count=groups[0].count, body=(body0, body0 + B),
                   step_op=step_op, scale_seqs=np.array(seqs, np.float64).reshape(len(seqs), groups[0].count),
                   bseg=cat["bseg"], bcast=groups[0].bcast, deferred=groups[0].deferred,
                   outer=items, hstep=soa(HSTEP, hstep), sin=cat["sin"], sout=cat["sout"], groups=G,
                   group_tiles=tuple(int(g.tiles) for g in groups),
                   dump=cat["dump"])
    return tg

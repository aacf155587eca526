"""The spatial pipeline on one chip (issue #27, compiler/plan/pipeline.py): G groups of
tiles, group k holding layers [k n, (k+1) n) of the encoder with their weights, images
streaming through. This module builds the chip's tile graph from the G groups' own tile
graphs (each expanded on a w-tile target from compiler/pod/split.chip_model: group 0 with
the patch embedding, group G-1 with the final norm and head); place, schedule and lower
then treat it like any other.

One pipeline step is the chip's whole superstep sequence, run `items` times by an outer
REPEAT (tg.outer); in step s group k works on item s - k:

  1               HOST: group 0's tiles read item s of the image stream (sin rows)
  2 .. P+1        the groups' supersteps before their Repeat (right-aligned: group 0's
                  patch embedding; the others' tiles SYNC through)
  P+2 .. P+B+1    the layer Repeat, one body shared by all groups (their plans must give
                  the same supersteps: same count, same kinds, else refused)
  .. P+B+E+1      the supersteps after the Repeat (left-aligned: group G-1's head)
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

from .tilegraph import BSEG, HOST, HSTEP, KERN, REQ, XFER, TileGraph, soa


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


def _take_host(h: dict, sel: np.ndarray, roff: int, stream: np.ndarray) -> dict:
    out = {f: h[f][sel].copy() for f in HOST}
    out["req"] += roff
    out["stream"] = stream
    return out


def merge(groups: list[TileGraph], tiles: int, items: int, image: str, x: str, y: str,
          image_bytes: int, out_bytes: dict, row_bytes: int, label: str = "") -> TileGraph:
    """The chip's tile graph (`tiles` tiles) from the groups' (each on w tiles, group k on
    tiles [k w, (k+1) w)). image: group 0's input stream (one item, image_bytes); x, y: the
    Repeat's carried input and output (row_bytes a row); out_bytes: group G-1's output
    streams and their bytes an item."""
    G, w = len(groups), groups[0].tiles
    if G < 2 or G * w > tiles:
        raise ValueError(f"pipeline: {G} groups of {w} tiles on a {tiles}-tile chip")
    body = [g.body_steps() for g in groups]
    kinds = {tuple(g.steps[b0:b1]) for g, (b0, b1) in zip(groups, body)}
    if len(kinds) > 1 or len({g.count for g in groups}) > 1:
        raise ValueError("pipeline: the groups' Repeat bodies differ (" + "; ".join(
            f"group {k}: {g.count} x {b1 - b0} supersteps" for k, (g, (b0, b1)) in enumerate(zip(groups, body))) + ")")
    P = max(b0 for b0, _ in body)
    B = body[0][1] - body[0][0]
    E = max(len(g.steps) - b1 for g, (_, b1) in zip(groups, body))
    S = P + B + E + 3
    host_out, shift = S - 1, S
    steps = ["compute"] * S
    steps[0] = steps[host_out - 1] = "host"
    steps[shift - 1] = "exchange"
    names, in_streams, panels = [], [image], {}
    parts = {f: [] for f in ("req", "kern", "xfer", "hin", "bseg", "sin", "sout")}
    scale, seqs, bank, kind = [], [], [], {}
    roffs, roff, koff = [], 0, 0
    out_names = list(groups[-1].out_streams)
    for k, (g, (b0, b1)) in enumerate(zip(groups, body)):
        Sk = len(g.steps)
        ev = np.arange(Sk + 3)                         # event map: 0 host in, steps, host out, END
        s = ev[1:Sk + 1]
        ev[1:Sk + 1] = np.where(s <= b0, 1 + P - b0 + s, np.where(s <= b1, 1 + P + s - b0, 1 + P + B + s - b1))
        ev[Sk + 1], ev[Sk + 2] = S + 1, S + 2
        for st in range(1, Sk + 1):                   # a chip superstep has one kind
            c = ev[st] - 1
            if kind.setdefault(c, g.steps[st - 1]) != g.steps[st - 1]:
                raise ValueError(f"pipeline: chip superstep {c + 1} is {kind[c]} in one group and "
                                 f"{g.steps[st - 1]} in group {k}")
            steps[c] = kind[c]
        gname = {i: len(names) + i for i in range(len(g.names))}
        names += [f"g{k}/{n}" for n in g.names]
        r = {f: g.req[f].copy() for f in REQ}
        r["tile"] += k * w
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
        kr["tile"] += k * w
        kr["step"] = ev[kr["step"]]
        for f in ("r0", "r1", "r2", "r3"):
            kr[f] = np.where(kr[f] >= 0, kr[f] + roff, kr[f])
        kr["sseq"] = np.where(kr["sseq"] != 0, kr["sseq"] + len(seqs), 0)
        parts["kern"].append(kr)
        scale.append(g.scale)
        seqs += list(g.scale_seqs)
        xr = {f: g.xfer[f].copy() for f in XFER}
        xr["step"] = ev[xr["step"]]
        xr["src"] += k * w
        xr["dst"] += k * w
        xr["sreq"] += roff
        xr["dreq"] += roff
        parts["xfer"].append(xr)
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
        roffs.append(roff)
        roff += len(r["tile"])
        koff += len(kr["tile"])
    # the shift: y of group k into x of group k + 1
    for k in range(G - 1):
        a, b = groups[k], groups[k + 1]
        ys = np.asarray(list(a.out_streams))[a.hout["stream"]] == y
        xs = np.asarray(b.in_streams)[b.hin["stream"]] == x
        xr = shift_rows(a, ys, k * w, b, xs, (k + 1) * w, row_bytes, (roffs[k], roffs[k + 1]))
        xr["step"][:] = shift
        parts["xfer"].append(xr)
    cat = {f: {c: np.concatenate([p[c] for p in parts[f]]).astype(np.int64) for c in parts[f][0]} for f in parts}
    hstep = []
    sizes = ([image_bytes], [out_bytes[n] for n in out_names])
    for d, rows, at in ((0, cat["sin"], 1), (1, cat["sout"], host_out)):   # one HOST per (tile, stream)
        tile = cat["req"]["tile"][rows["req"]]
        order = np.lexsort((rows["stream"], tile))
        for f in rows:
            rows[f] = rows[f][order]
        key = tile[order] * len(sizes[d]) + rows["stream"]
        u, first, cnt = np.unique(key, return_index=True, return_counts=True)
        hstep += [(at, q // len(sizes[d]), d, f0, c, sizes[d][q % len(sizes[d])]) for q, f0, c in zip(u, first, cnt)]
    body0 = 1 + P
    tg = TileGraph(tiles=tiles, steps=steps, names=names, req=cat["req"], bank=np.concatenate(bank).reshape(-1, 2),
                   kern=cat["kern"], scale=np.concatenate(scale), xfer=cat["xfer"], hin=cat["hin"],
                   hout=soa(HOST), in_streams=in_streams,
                   out_streams={n: items * out_bytes[n] for n in out_names}, label=label or f"pipeline G={G}",
                   in_panels=panels, count=groups[0].count, body=(body0, body0 + B),
                   step_op=[-1] * S, scale_seqs=np.array(seqs, np.float64).reshape(len(seqs), groups[0].count),
                   bseg=cat["bseg"], bcast=groups[0].bcast, deferred=groups[0].deferred,
                   outer=items, hstep=soa(HSTEP, hstep), sin=cat["sin"], sout=cat["sout"])
    return tg

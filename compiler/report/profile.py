"""profile.html: one self-contained page (plotly.js inlined once, no CDN, opens
offline) with a headline table, the superstep timeline (with a Repeat: cycles per
iteration and the last iteration's supersteps), one layer's cycles by op and kind
(report/ops.py: the Repeat body's last iteration, which run.cycles_per_layer counts), per-tile cycle and memory heat maps, the fullest tile's memory map
over time and, when the pipeline supplies them, host time and peak RSS per phase."""
from __future__ import annotations

import html as _html
import json
import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.io import to_html
from plotly.subplots import make_subplots

from ..target import Target

CSS = ("body{font-family:sans-serif;max-width:1200px;margin:1em auto;color:#222}"
       "table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd}"
       ".ok{color:#1a7f37}.rejected,.invalid{color:#c62828}h2{margin-top:1.5em}")


def _grid(v: np.ndarray):
    """Tiles laid out row-major on a near-square grid; hover text names the tile."""
    v = np.asarray(v, dtype=float)
    w = int(np.ceil(np.sqrt(max(len(v), 1))))
    z = np.full(w * w, np.nan)
    z[:len(v)] = v
    txt = np.array([f"tile {i}" if i < len(v) else "" for i in range(w * w)])
    return z.reshape(w, w), txt.reshape(w, w)


def _heatmap(v, title, colorscale, unit):
    """Tiles as a near-square grid of w columns, tile t at row t // w, column t % w."""
    z, txt = _grid(v)
    w = z.shape[1]
    f = go.Figure(go.Heatmap(z=z, text=txt, colorscale=colorscale, colorbar=dict(title=unit),
                             hovertemplate="%{text}: %{z:,.0f} " + unit + "<extra></extra>"))
    f.update_layout(title=f"{title}; tiles {w} to a row: tile = {w} × row + column", height=460,
                    xaxis=dict(title=f"column (tile mod {w})", constrain="domain"),
                    yaxis=dict(title=f"row (tile ÷ {w}, rounded down)", scaleanchor="x", autorange="reversed"))
    return f


CARTESIAN = Path(__file__).with_name("plotly-cartesian.min.js")
MAP_COLORS = 10      # traces of the memory map (neighbouring buffers differ in colour)
KIND_COLORS = {"matmul": "#1f77b4", "vector": "#2ca02c", "exchange": "#ff7f0e", "sync": "#7f7f7f"}


def _timeline(run_res, sched, body=None):
    """The supersteps as bars; with a Repeat (body: its static steps [b0, b1)), one bar
    per iteration (and the steps before and after it, a tower's patch embedding and head,
    as one bar each) and the last iteration's supersteps (27 layers: 29 + 33 bars, not 891)."""
    figs = []
    cyc = np.asarray(run_res.cycles_per_step)
    kinds = list(run_res.step_kind)
    count = getattr(sched, "count", 1) if sched is not None else 1
    first, S = 0, len(cyc)
    if count > 1 and body is not None and body[1] > body[0]:
        b0, B = body[0], body[1] - body[0]
        if b0 + count * B <= len(cyc):
            first, S = b0 + (count - 1) * B, B             # run steps of the last iteration
            per = cyc[b0:b0 + count * B].reshape(count, B).sum(1)
            x = [str(i) for i in range(1, count + 1)]
            y = [int(v) for v in per]
            if b0:
                x, y = ["before"] + x, [int(cyc[:b0].sum())] + y
            if b0 + count * B < len(cyc):
                x, y = x + ["after"], y + [int(cyc[b0 + count * B:].sum())]
            f = go.Figure(go.Bar(x=x, y=y, marker_color="#1f77b4",
                                 hovertemplate="%{x}: %{y:,} cycles<extra></extra>"))
            f.update_layout(title=f"Cycles per Repeat iteration ({count} iterations of {B} supersteps; "
                                  f"{run_res.cycles:,} cycles in all)", xaxis=dict(title="iteration", type="category"),
                            yaxis_title="cycles", height=320)
            figs.append(("iterations", "Repeat iterations", f))
    c = cyc[first:first + S]
    start = np.concatenate([[0], np.cumsum(c)[:-1]])
    colors = {"compute": "#1f77b4", "exchange": "#ff7f0e", "idle": "#7f7f7f"}
    k = kinds[first:first + S]
    f = go.Figure(go.Bar(x=c, base=start, y=[f"{first + i + 1} {kk}" for i, kk in enumerate(k)],
                         orientation="h", marker_color=[colors.get(kk, "#999") for kk in k],
                         text=[f"{v} cycles" for v in c],
                         hovertemplate="superstep %{y}: cycles %{base}..%{x}<extra></extra>"))
    what = f"the last iteration: {int(c.sum()):,} cycles" if first else \
        f"simulated: {run_res.cycles} cycles = {run_res.ms:.4f} ms"
    f.update_layout(title=f"Superstep timeline ({what})",
                    xaxis_title="cycle", yaxis=dict(title="superstep", autorange="reversed"),
                    height=max(260, 40 + 28 * len(c)))
    figs.append(("timeline", "Supersteps" + (" of the last iteration" if first else ""), f))
    return figs


def _ops_title(ops: list, count: int) -> str:
    """count: the Repeat's iterations (0: no Repeat)."""
    total = sum(r[-1] for r in ops)
    if count:
        return (f"One layer's cycles by op and kind ({total:,} cycles: the last of {count} Repeat iterations, "
                f"run.cycles_per_layer; steps outside the Repeat are in the timeline)")
    return f"Cycles by op and kind ({total:,} cycles: the whole program)"


def _ops_figure(ops: list, count: int = 0):
    """One layer's cycles per graph op, stacked by kind."""
    from .ops import KINDS
    labels = [f"{r[0]} {r[2]} → {r[1]}" for r in ops]
    f = go.Figure()
    for i, kind in enumerate(KINDS):
        f.add_trace(go.Bar(y=labels, x=[r[3 + i] for r in ops], name=kind, orientation="h",
                           marker_color=KIND_COLORS[kind],
                           hovertemplate="%{y}: %{x:,} " + kind + " cycles<extra></extra>"))
    f.update_layout(barmode="stack", title=_ops_title(ops, count),
                    xaxis_title="cycles", yaxis=dict(autorange="reversed"),
                    height=max(260, 60 + 26 * len(ops)))
    return f


def ops_html(ops: list) -> str:
    """The same breakdown as a table (cycles and share of the layer)."""
    from .ops import KINDS
    total = max(sum(r[-1] for r in ops), 1)
    head = "".join(f"<th>{k}</th>" for k in ("op", "output", "kind", *KINDS, "total", "share"))
    rows = "".join("<tr>" + "".join(f"<td>{_html.escape(str(v))}</td>" for v in r[:3]) +
                   "".join(f"<td>{v:,}</td>" for v in r[3:]) + f"<td>{100 * r[-1] / total:.1f} %</td></tr>"
                   for r in ops)
    sums = [sum(r[3 + i] for r in ops) for i in range(len(KINDS))]
    rows += ("<tr><th colspan=3>all ops</th>" + "".join(f"<th>{v:,}</th>" for v in sums) +
             f"<th>{total:,}</th><th>{'; '.join(f'{k} {100 * v / total:.0f} %' for k, v in zip(KINDS, sums))}</th></tr>")
    return f"<table id='ops-table'><tr>{head}</tr>{rows}</table>"


def _figures(place_res, sched, run_res, t: Target, host: dict, ops=None):
    figs = []
    if run_res is not None and not run_res.rejection:
        tg = getattr(place_res, "tilegraph", None)
        figs += _timeline(run_res, sched, tg.body_steps() if tg is not None and tg.count > 1 else None)
        if ops:
            count = tg.count if tg is not None and (tg.count > 1 or tg.body) else 0
            figs.append(("ops", "Cycles by op (PopVision's execution view)" + (", one layer" if count else ""),
                         _ops_figure(ops, count)))
        if run_res.tile_cycles is not None:
            tc = np.asarray(run_res.tile_cycles).sum(0)
            figs.append(("tile-cycles", "Cycles per tile",
                         _heatmap(tc, "Busy cycles per tile (profile samples)", "Viridis", "cycles")))
    if place_res is not None and getattr(place_res, "placement", None) is not None:
        tg, pl = place_res.tilegraph, place_res.placement
        fp = np.asarray(tg.analysis["footprint_bytes"])
        figs.append(("tile-memory", "Memory per tile",
                     _heatmap(fp, f"Peak bytes per tile (of {t.tile_bytes:,})", "Inferno", "bytes")))
        tile = int(np.argmax(fp))
        r = tg.req
        f = go.Figure()
        # one trace per colour, its rectangles separated by gaps (fill="toself" closes each
        # segment): a trace per buffer (135 at 4 layers) was most of the page's drawing time
        bufs = np.flatnonzero(r["tile"] == tile)
        for c in range(min(MAP_COLORS, len(bufs))):
            xs, ys, text = [], [], []
            for i in bufs[c::MAP_COLORS]:
                a, s = int(pl.addr[i]), int(r["size"][i])
                lo, hi = int(r["start"][i]), int(r["end"][i])
                xs += [lo, hi, hi, lo, lo, None]
                ys += [a, a, a + s, a + s, a, None]
                text += [f"{tg.names[r['name'][i]]}: {s:,} B at 0x{a:X}, events {lo}..{hi}"] * 5 + [""]
            f.add_trace(go.Scatter(x=xs, y=ys, text=text, fill="toself", mode="lines", showlegend=False,
                                   hovertemplate="%{text}<extra></extra>"))
        for lo, hi in pl.support.ranges[tile]:
            if hi > lo:
                f.add_hrect(y0=int(lo), y1=int(hi), fillcolor="grey", opacity=0.35, line_width=0)
        f.add_hline(y=t.region0_end, line_dash="dot", annotation_text="region 0 | region 1")
        f.update_layout(title=f"Memory map of tile {tile} (the fullest) over events; grey = support reservations",
                        xaxis_title="event", height=560,
                        yaxis=dict(title="address", range=[t.memory_base, t.memory_end], tickformat="#x"))
        figs.append(("memory-map", f"Memory map of tile {tile}", f))
    if host:
        names = list(host)
        f = make_subplots(rows=1, cols=2, subplot_titles=("elapsed s (inside the stage)", "peak RSS MiB (process tree)"))
        f.add_trace(go.Bar(x=names, y=[host[n].get("elapsed_s", 0) for n in names], marker_color="#1f77b4"), 1, 1)
        f.add_trace(go.Bar(x=names, y=[host[n].get("peak_rss_mib", 0) for n in names], marker_color="#d62728"), 1, 2)
        f.update_layout(title="Host time and memory per phase", showlegend=False, height=380)
        figs.append(("host", "Host time and RSS per phase", f))
    return figs


def _version(js: str) -> str:
    m = re.search(r"plotly\.js(?: \([^)]*\))? v(\S+)", js[:300])
    return m.group(1) if m else "?"


def plotly_js() -> str:
    """plotly.js for the page, inlined once: the "cartesian" partial bundle vendored here
    (plotly-cartesian.min.js, npm plotly.js-cartesian-dist-min, MIT; bar, heatmap, scatter
    are every trace the page draws) -- 1.5 MB against the full bundle's 4.8 MB, and its
    parsing was half of a 27-layer page's load time -- when it is the plotly.js version
    plotly.py writes figures for; else plotly.py's own full bundle."""
    from plotly.offline import get_plotlyjs
    full = get_plotlyjs()
    part = CARTESIAN.read_text() if CARTESIAN.is_file() else ""
    return part if part and _version(part) == _version(full) else full


def _headline(summary: dict, run_res, model) -> str:
    status = summary.get("status", "?")
    rows = [("status", f"<b class='{_html.escape(status)}'>{_html.escape(status)}</b>")]
    g = getattr(model, "graph", None)
    if g is not None:
        rows.append(("model", _html.escape(str(g.name))))
    if run_res is not None and not run_res.rejection:
        rows += [("cycles", f"{run_res.cycles:,}"), ("ms at the target clock", f"{run_res.ms:.6f}"),
                 ("supersteps", str(len(run_res.cycles_per_step))),
                 ("max abs error / tolerance", f"{run_res.max_abs_error:.3g} / {run_res.tolerance:.3g}")]
    rej = summary.get("rejected")
    if rej:
        rows += [("rejected in", _html.escape(str(rej.get("phase")))),
                 ("reason", _html.escape(str(rej.get("reason")))),
                 ("message", _html.escape(str(rej.get("message"))))]
    return "<table id='headline'>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def profile_html(model, place_res, sched, run_res, t: Target, summary: dict, host: dict, ops=None) -> str:
    g = getattr(model, "graph", None)
    if ops and g is not None:       # one layer: the Repeat body's ops, and any op its steps serve
        first, stop = g.body()      # (the carried x; the step that hands y on), not those run once
        ops = [r for r in ops if first <= r[0] < stop or r[-1]]
    figs = _figures(place_res, sched, run_res, t, host, ops)
    parts = [f"<script>{plotly_js()}</script>"] if figs else []
    for fid, heading, f in figs:
        parts.append(f"<h2>{_html.escape(heading)}</h2>" +
                     to_html(f, full_html=False, include_plotlyjs=False, div_id=fid,
                             config={"displaylogo": False, "responsive": True}) +
                     (ops_html(ops) if fid == "ops" else ""))
    title = _html.escape(getattr(getattr(model, "graph", None), "name", "trial"))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Tessera profile: " + title +
            "</title><style>" + CSS + "</style></head><body><h1>Tessera profile: " + title + "</h1>" +
            _headline(summary, run_res, model) +
            "<details><summary>summary (metrics/trial.json)</summary><pre id='summary'>" +
            _html.escape(json.dumps(summary, indent=2, sort_keys=True, default=str)) + "</pre></details>" +
            "".join(parts) + "</body></html>")

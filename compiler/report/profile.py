"""profile.html: one self-contained page (plotly.js inlined once, no CDN, opens
offline) with a headline table, the superstep timeline, per-tile cycle and memory
heat maps, the fullest tile's memory map over time and, when the pipeline supplies
them, host time and peak RSS per phase."""
from __future__ import annotations

import html as _html
import json

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
    z, txt = _grid(v)
    f = go.Figure(go.Heatmap(z=z, text=txt, colorscale=colorscale, colorbar=dict(title=unit),
                             hovertemplate="%{text}: %{z:,.0f} " + unit + "<extra></extra>"))
    f.update_layout(title=title, height=460, xaxis=dict(title="tile mod width", constrain="domain"),
                    yaxis=dict(title="tile / width", scaleanchor="x", autorange="reversed"))
    return f


def _figures(place_res, sched, run_res, t: Target, host: dict):
    figs = []
    if run_res is not None and not run_res.rejection:
        cyc = np.asarray(run_res.cycles_per_step)
        start = np.concatenate([[0], np.cumsum(cyc)[:-1]])
        colors = {"compute": "#1f77b4", "exchange": "#ff7f0e", "idle": "#7f7f7f"}
        f = go.Figure(go.Bar(x=cyc, base=start, y=[f"{i + 1} {k}" for i, k in enumerate(run_res.step_kind)],
                             orientation="h", marker_color=[colors.get(k, "#999") for k in run_res.step_kind],
                             text=[f"{c} cycles" for c in cyc],
                             hovertemplate="superstep %{y}: cycles %{base}..%{x}<extra></extra>"))
        f.update_layout(title=f"Superstep timeline (simulated: {run_res.cycles} cycles = {run_res.ms:.4f} ms)",
                        xaxis_title="cycle", yaxis=dict(title="superstep", autorange="reversed"),
                        height=max(260, 40 + 28 * len(cyc)))
        figs.append(("timeline", "Supersteps", f))
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
        for i in np.flatnonzero(r["tile"] == tile):
            a, s = int(pl.addr[i]), int(r["size"][i])
            lo, hi = int(r["start"][i]), int(r["end"][i])
            f.add_trace(go.Scatter(x=[lo, hi, hi, lo, lo], y=[a, a, a + s, a + s, a], fill="toself", mode="lines",
                                   name=f"{tg.names[r['name'][i]]} ({s:,} B)",
                                   hovertemplate=f"{tg.names[r['name'][i]]}: {s:,} B at 0x{a:X}, "
                                                 f"events {lo}..{hi}<extra></extra>"))
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


def profile_html(model, place_res, sched, run_res, t: Target, summary: dict, host: dict) -> str:
    figs = _figures(place_res, sched, run_res, t, host)
    parts = []
    for i, (fid, heading, f) in enumerate(figs):
        parts.append(f"<h2>{_html.escape(heading)}</h2>" +
                     to_html(f, full_html=False, include_plotlyjs=(i == 0), div_id=fid,
                             config={"displaylogo": False, "responsive": True}))
    title = _html.escape(getattr(getattr(model, "graph", None), "name", "trial"))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Tessera profile: " + title +
            "</title><style>" + CSS + "</style></head><body><h1>Tessera profile: " + title + "</h1>" +
            _headline(summary, run_res, model) +
            "<details><summary>summary (metrics/trial.json)</summary><pre id='summary'>" +
            _html.escape(json.dumps(summary, indent=2, sort_keys=True, default=str)) + "</pre></details>" +
            "".join(parts) + "</body></html>")

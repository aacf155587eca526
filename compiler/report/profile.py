"""profile.html: one self-contained page (plotly.js inlined, no CDN) with the
superstep timeline, per-tile cycle and memory heat maps, one tile's memory map over
time and, when the pipeline supplies them, host time and RSS per phase."""
from __future__ import annotations

import html as _html
import json

import numpy as np
import plotly.graph_objects as go
from plotly.io import to_html
from plotly.subplots import make_subplots

from ..target import Target


def _grid(v: np.ndarray) -> np.ndarray:
    w = int(np.ceil(np.sqrt(len(v))))
    out = np.full(w * w, np.nan)
    out[:len(v)] = v
    return out.reshape(w, w)


def _figures(place_res, sched, run_res, t: Target, host: dict):
    figs = []
    if run_res is not None and not run_res.rejection:
        cyc = np.asarray(run_res.cycles_per_step)
        start = np.concatenate([[0], np.cumsum(cyc)[:-1]])
        colors = {"compute": "#1f77b4", "exchange": "#ff7f0e", "idle": "#7f7f7f"}
        f = go.Figure(go.Bar(x=cyc, base=start, y=[k for k in run_res.step_kind], orientation="h",
                             marker_color=[colors.get(k, "#999") for k in run_res.step_kind],
                             text=[f"superstep {i + 1}: {c} cycles" for i, c in enumerate(cyc)]))
        f.update_layout(title=f"Supersteps (simulated, {run_res.cycles} cycles = {run_res.ms:.4f} ms)",
                        xaxis_title="cycle", height=300)
        figs.append(("timeline", f))
        tc = np.asarray(run_res.tile_cycles).sum(0)
        figs.append(("tile-cycles", go.Figure(go.Heatmap(z=_grid(tc), colorscale="Viridis"),
                                              layout=dict(title="Cycles per tile (profile samples)", height=420))))
    if place_res is not None and place_res.placement is not None:
        tg, pl = place_res.tilegraph, place_res.placement
        fp = tg.analysis["footprint_bytes"]
        figs.append(("tile-memory", go.Figure(go.Heatmap(z=_grid(fp), colorscale="Inferno"),
                                              layout=dict(title=f"Peak bytes per tile (of {t.tile_bytes})",
                                                          height=420))))
        tile = int(np.argmax(fp))
        r = tg.req
        sel = np.flatnonzero(r["tile"] == tile)
        f = go.Figure()
        for i in sel:
            a, s = int(pl.addr[i]), int(r["size"][i])
            f.add_trace(go.Scatter(x=[r["start"][i], r["end"][i], r["end"][i], r["start"][i], r["start"][i]],
                                   y=[a, a, a + s, a + s, a], fill="toself", mode="lines",
                                   name=f"{tg.names[r['name'][i]]} ({s} B)"))
        for lo, hi in pl.support.ranges[tile]:
            f.add_hrect(y0=int(lo), y1=int(hi), fillcolor="grey", opacity=0.3, line_width=0)
        f.add_hline(y=t.region0_end, line_dash="dot", annotation_text="region 1")
        f.update_layout(title=f"Memory map of tile {tile} (fullest) over events; grey = support",
                        xaxis_title="event", yaxis_title="address", height=500)
        figs.append(("memory-map", f))
    if host:
        names = list(host)
        f = make_subplots(rows=1, cols=2, subplot_titles=("elapsed s", "peak RSS MiB"))
        f.add_trace(go.Bar(x=names, y=[host[n].get("elapsed_s", 0) for n in names]), 1, 1)
        f.add_trace(go.Bar(x=names, y=[host[n].get("peak_rss_mib", 0) for n in names]), 1, 2)
        f.update_layout(title="Host time and memory per phase", showlegend=False, height=350)
        figs.append(("host", f))
    return figs


def profile_html(model, place_res, sched, run_res, t: Target, summary: dict, host: dict) -> str:
    figs = _figures(place_res, sched, run_res, t, host)
    parts = []
    for i, (fid, f) in enumerate(figs):
        parts.append(to_html(f, full_html=False, include_plotlyjs=(i == 0), div_id=fid,
                             config={"displaylogo": False}))
    title = _html.escape(getattr(getattr(model, "graph", None), "name", "trial"))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Tessera profile: " + title +
            "</title></head><body style='font-family:sans-serif'><h1>Tessera profile: " + title +
            "</h1><pre id='summary'>" + _html.escape(json.dumps(summary, indent=2, default=str)) +
            "</pre>" + "".join(parts) + "</body></html>")

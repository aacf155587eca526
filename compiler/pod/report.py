"""report on a pod: the headline (metrics/trial.json, the same names as one chip's plus
chip<k>.* and link<k>.*), plot data, and profile.html with the chips side by side (one
table row and one pipeline bar per chip and link) followed by each chip's own figures
(timeline, cycles by op for one layer, per-tile heat maps, fullest tile's memory map)."""
from __future__ import annotations

import html as _html
import json

import plotly.graph_objects as go
from plotly.io import to_html

from ..report import ReportResult, first_rejection, headline, plot_data
from ..report.ops import ops_table
from ..report.profile import CSS, _figures, plotly_js
from .split import chip_model


def _chips_table(run_res, place_res, sched) -> str:
    head = ["chip", "layers", "cycles", "cycles / layer", "min free B", "validated", "link out B",
            "link cycles (oracle)", "transfer check"]
    rows = []
    for k, c in enumerate(run_res.chips):
        li = run_res.links[k] if k < len(run_res.links) else None
        tr = run_res.chips[k + 1].transfer if k + 1 < len(run_res.chips) else {}
        rows.append([k, run_res.split.layers[k], f"{c.run.cycles:,}", f"{c.run.cycles_per_layer:,}",
                     f"{place_res.chips[k].metrics()['min_free_bytes']:,}", c.run.validated,
                     f"{li['bytes']:,}" if li else "-", f"{li['cycles']:,} ({li['oracle_cycles']:,})" if li else "-",
                     f"{tr['bytes'] - tr['failed']:,} / {tr['bytes']:,} B equal" if tr else "-"])
    return ("<table id='chips'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" +
            "".join("<tr>" + "".join(f"<td>{_html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows) +
            "</table>")


def _pipeline(run_res):
    f = go.Figure()
    n = len(run_res.chips)
    names = [f"chip {k}" for k in range(n)]
    f.add_trace(go.Bar(name="chip program", x=names, y=[c.run.cycles for c in run_res.chips]))
    f.add_trace(go.Bar(name="link out", x=names, y=[li["cycles"] for li in run_res.links] + [0]))
    f.update_layout(barmode="stack", height=380, yaxis_title="cycles",
                    title=f"Pipeline stages: latency {run_res.cycles:,} cycles; the slowest stage "
                          f"(chip {run_res.throughput.get('slowest_stage')}) sets images/s")
    return f


def pod_report(model, plan_res, expand_res, place_res, sched, run_res, t, host=None) -> ReportResult:
    rej = first_rejection(model, plan_res, expand_res, place_res, sched, run_res)
    summary = headline(rej, place_res, run_res)
    split = getattr(plan_res, "split", None)
    if split is not None:
        summary["chips"] = len(split.layers)
        summary["layers_per_chip"] = list(split.layers)
    if rej:
        html = _page(model, summary, "", [])
        return ReportResult(summary, html, plot_data(None, None))
    for k, c in enumerate(run_res.chips):
        summary[f"chip{k}"] = {"cycles": c.run.cycles, "min_free_bytes": place_res.chips[k].metrics()["min_free_bytes"]}
    for k, li in enumerate(run_res.links):
        summary[f"link{k}"] = {"bytes": li["bytes"], "cycles": li["cycles"]}
    figs = [("pipeline", "Pipeline over chips", _pipeline(run_res))]
    last_ops = None
    for k, c in enumerate(run_res.chips):
        mk = chip_model(model, split, k)
        ops = ops_table(mk.graph, place_res.chips[k].tilegraph, sched.chips[k], c.run, t.sync_cycles)
        if k == len(run_res.chips) - 1:
            last_ops = ops
        first, stop = mk.graph.body()
        ops = [r for r in ops if first <= r[0] < stop or r[-1]]
        figs += [(f"chip{k}-{fid}", f"chip {k}: {h}", f)
                 for fid, h, f in _figures(place_res.chips[k], sched.chips[k], c.run, t, {}, ops)]
    html = _page(model, summary, _chips_table(run_res, place_res, sched), figs)
    plots = plot_data(place_res.chips[-1], run_res.chips[-1].run, last_ops)
    return ReportResult(summary, html, plots)


def _page(model, summary, table, figs) -> str:
    title = _html.escape(getattr(getattr(model, "graph", None), "name", "trial"))
    parts = [f"<script>{plotly_js()}</script>"] if figs else []
    for fid, heading, f in figs:
        parts.append(f"<h2>{_html.escape(heading)}</h2>" +
                     to_html(f, full_html=False, include_plotlyjs=False, div_id=fid,
                             config={"displaylogo": False, "responsive": True}))
    status = summary.get("status", "?")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Tessera pod profile: " + title +
            "</title><style>" + CSS + "</style></head><body><h1>Tessera pod profile: " + title + "</h1>" +
            f"<p id='headline'>status <b class='{_html.escape(status)}'>{_html.escape(status)}</b></p>" + table +
            "<details><summary>summary (metrics/trial.json)</summary><pre id='summary'>" +
            _html.escape(json.dumps(summary, indent=2, sort_keys=True, default=str)) + "</pre></details>" +
            "".join(parts) + "</body></html>")

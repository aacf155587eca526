"""report: the trial's headline (metrics/trial.json: status, cycles, error, memory, or the
rejection), the plot data that `dvc plots` reads, and a self-contained profile.html
(docs/architecture.md §3 "report", §6 metrics)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..target import Target
from .ops import KINDS, ops_table
from .profile import profile_html


@dataclass
class ReportResult:
    summary: dict
    html: str
    plots: dict = field(default_factory=dict)   # file name -> CSV text (dvc plots data)

    def metrics(self) -> dict:
        return self.summary


def first_rejection(*results):
    for r in results:
        if getattr(r, "rejection", None):
            return r.rejection
    return None


def _csv(header: list[str], rows) -> str:
    return ",".join(header) + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows)


OPS_HEADER = ["op", "name", "kind", *KINDS, "total"]


def plot_data(place_res, run_res, ops: list | None = None) -> dict:
    """Cycles per superstep, per-tile cycles/memory and one layer's cycles per op and
    kind (ops.py) as CSV (empty tables for a rejected trial, so `dvc plots diff`
    still has a file to read)."""
    steps, tiles = [], []
    ok_run = run_res is not None and not run_res.rejection
    if ok_run:
        steps = [(i + 1, k, int(c)) for i, (k, c) in enumerate(zip(run_res.step_kind, run_res.cycles_per_step))]
    fp = None
    if place_res is not None and getattr(place_res, "placement", None) is not None:
        fp = np.asarray(place_res.tilegraph.analysis["footprint_bytes"])
    tc = np.asarray(run_res.tile_cycles).sum(0) if ok_run and run_res.tile_cycles is not None else None
    n = len(fp) if fp is not None else (len(tc) if tc is not None else 0)
    for t in range(n):
        tiles.append((t, int(tc[t]) if tc is not None else "", int(fp[t]) if fp is not None else ""))
    return {"supersteps.csv": _csv(["superstep", "kind", "cycles"], steps),
            "tiles.csv": _csv(["tile", "cycles", "peak_bytes"], tiles),
            "ops.csv": _csv(OPS_HEADER, ops or [])}


# the headline's figures and the phase result they come from (docs/architecture.md §6)
HEADLINE = (("cycles", "run"), ("cycles_per_layer", "run"), ("ms", "run"), ("latency_ms", "run"),
            ("images_per_s", "run"), ("max_abs_error", "run"),
            ("tolerance", "run"), ("model_rms_rel_error", "run"), ("model_cosine", "run"),
            ("min_free_bytes", "place"))


def rejection_figures(rej) -> dict:
    """phase, reason, message and the figures that apply: a figure that does not (a plan
    rejection has no tile, a negative or None value) is left out rather than given a sentinel."""
    figs = {k: v for k, v in rej.metrics().items()
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0)}
    return figs | {"message": rej.message}


def rejection_line(rej: dict) -> str:
    """One readable line: `rejected at expand (exchange_table_cap): <message>`."""
    return f"rejected at {rej.get('phase')} ({rej.get('reason')}): {rej.get('message')}"


def headline(rej, place_res, run_res) -> dict:
    """metrics/trial.json: one row of `dvc metrics show metrics/trial.json`."""
    if rej:
        return {"status": "rejected", "rejected": rejection_figures(rej)}
    src = {"run": run_res.metrics(), "place": place_res.metrics()}
    # the failed checks in one line (run.failed: per-op, end to end, model: ..., fp8 accuracy: ...)
    failed = getattr(run_res, "failed", "") or (getattr(run_res, "model", None) or {}).get("failed")
    return {"status": "ok" if run_res.validated else "invalid",
            **{k: src[p][k] for k, p in HEADLINE if src[p].get(k) is not None},
            **({"invalid": failed} if failed else {})}


def report(model, plan_res, expand_res, place_res, sched, run_res, t: Target, host: dict | None = None):
    """`host` (time and RSS per phase) is drawn in the profile only when given: the DVC stage
    leaves it out so that profile.html, like every tracked output, is byte-identical on a rerun."""
    if hasattr(run_res, "pod_report"):        # several chips: the pod's run reports itself (compiler/pod/report.py)
        return run_res.pod_report(model, plan_res, expand_res, place_res, sched, t, host)
    rej = first_rejection(model, plan_res, expand_res, place_res, sched, run_res)
    summary = headline(rej, place_res, run_res)
    ops = None if rej else ops_table(model.graph, place_res.tilegraph, sched, run_res, t.sync_cycles)
    html = profile_html(model, place_res, sched, run_res, t, summary, host or {}, ops)
    return ReportResult(summary, html, plot_data(place_res, run_res, ops))

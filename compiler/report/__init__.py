"""report: the trial summary (status, rejection, headline metrics) and a
self-contained profile.html (DESIGN §3.8)."""
from __future__ import annotations

from dataclasses import dataclass

from ..target import Target
from .profile import profile_html


@dataclass
class ReportResult:
    summary: dict
    html: str

    def metrics(self) -> dict:
        return self.summary


def first_rejection(*results):
    for r in results:
        if getattr(r, "rejection", None):
            return r.rejection
    return None


def report(model, plan_res, expand_res, place_res, sched, run_res, t: Target, host: dict | None = None):
    rej = first_rejection(model, plan_res, expand_res, place_res, sched, run_res)
    if rej:
        summary = {"status": "rejected", "rejected": rej.metrics() | {"message": rej.message}}
    else:
        summary = {"status": "ok" if run_res.validated else "invalid"}
    if host:
        summary["host"] = host
    html = profile_html(model, place_res, sched, run_res, t, summary, host or {})
    return ReportResult(summary, html)

"""A model pipelined over several chips (DESIGN.md §7a "Beyond one chip"; issue #28).

  machine.py  the pod: N chips of one Target + IPU-Links (target.pod in conf/target/pod*.yaml)
  split.py    the stage split by cost and memory; chip k's sub-graph and data
  phases.py   plan (split, then plan per chip) and the single-chip phases per chip: PodResult
  link.py     the LINK program: SEND rows on chip k, RECV rows on chip k+1, as words
  run.py      chip after chip (one mapper task each), the link between, the pipeline's figures
  report.py   the headline and profile.html with the chips side by side

The single-chip phases are reused as they are (compiler/phases.py calls `pod_phase` when
the target has a `pod` key); compiler/sim/link.py executes and costs a LINK program and
compiler/sim/link_oracle.py re-derives its cycles."""
from __future__ import annotations

from .machine import Pod, chip_dict, pod_of

__all__ = ["Pod", "chip_dict", "pod_of", "pod_phase"]


def pod_phase(name: str, results: dict, cfg: dict, mapper, fns: dict, t, p):
    """Phase `name` on a pod target (t: one chip's Target, p: the Policy). `fns`: the
    single-chip functions of compiler/phases.py (expand, place, schedule, lower), each called
    per chip with the chip's results."""
    from .phases import per_chip, pod_plan
    pod = pod_of(cfg["target"])
    r = results
    if name == "plan":
        return pod_plan(r["model"], t, p, pod, mapper)
    if name == "expand":
        return per_chip(name, lambda pl, mk: fns["expand"](mk, pl, cfg, mapper), r["plan"], m=r["model"])
    if name == "place":
        return per_chip(name, lambda e: fns["place"](e, cfg, mapper), r["expand"])
    if name == "schedule":
        return per_chip(name, lambda pl: fns["schedule"](pl, cfg, mapper), r["place"])
    if name == "lower":
        return per_chip(name, lambda pl, s: fns["lower"](pl, s, cfg, mapper), r["place"], r["schedule"])
    if name == "run":
        from .run import pod_run
        return pod_run(r["lower"], r["model"], r["reference"], t, p, pod, mapper)
    if name == "report":
        from .report import pod_report
        return pod_report(*(r[u] for u in ("model", "plan", "expand", "place", "schedule", "run")), t)
    return None     # model, reference: the whole tower's

"""The phases on a multi-chip target (DESIGN.md §7a): the single-chip phases, per chip.

    plan      the stage split (split.choose: by cost and memory), then plan per chip
    expand, place, schedule, lower     the single-chip phase on each chip's result
    run       pod/run.py: chip after chip, each on its own worker, the link between them
    model, reference, report           the whole tower's (report: pod/report.py)

Each returns a PodResult holding the chips' results in order; a chip's rejection is the
pod's, named with the chip (later phases pass it through as one chip's would be).
Nothing here imports dask: the mapper it is handed fans out (compiler/mapper.py)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..result import Rejection
from .split import Split, chip_model, choose


@dataclass
class PodResult:
    phase: str
    chips: list = field(default_factory=list)
    split: Split | None = None
    rejection: object = None

    @property
    def dumps(self) -> list:
        """place: the chips' failing tile problems (policy.place.dump), named chip<k>-<name>."""
        return [(f"chip{k}-{n}", text) for k, c in enumerate(self.chips) for n, text in getattr(c, "dumps", [])]

    def metrics(self) -> dict:
        out = {"chips": len(self.chips)}
        if self.split is not None:
            out["split"] = self.split.metrics()
        if self.rejection:
            return out
        per = [c.metrics() for c in self.chips]
        out |= {f"chip{k}": m for k, m in enumerate(per)}
        if self.phase == "place":     # the fullest tile of any chip (the headline's min_free_bytes)
            out["min_free_bytes"] = min(m["min_free_bytes"] for m in per)
        if self.phase in ("expand", "schedule") and all("cycles" in m for m in per):
            out["cycles"] = [m["cycles"] for m in per]
        return out


def chip_rejection(rej: Rejection, k: int) -> Rejection:
    return replace(rej, message=f"chip {k}: {rej.message}", figures={**rej.figures, "chip": k})


def _collect(phase: str, split, results) -> PodResult:
    for k, r in enumerate(results):
        if getattr(r, "rejection", None):
            return PodResult(phase, list(results), split, chip_rejection(r.rejection, k)
                             if "chip" not in r.rejection.figures else r.rejection)
    return PodResult(phase, list(results), split)


def pod_plan(m, t, policy, pod, mapper) -> PodResult:
    from ..deferred_norm import device_model
    from ..plan import plan
    if m.rejection:
        return PodResult("plan", rejection=m.rejection)
    m = device_model(m, policy.deferred_norm)                     # as expand lowers it
    split = choose(m.graph, t, pod)
    if isinstance(split, Rejection):
        return PodResult("plan", rejection=split)
    return _collect("plan", split, [plan(chip_model(m, split, k), t, policy) for k in range(pod.chips)])


def per_chip(phase: str, fn, *ups: PodResult, m=None) -> PodResult:
    """fn(chip k's upstream results..., [chip k's model]) for every chip."""
    first = ups[0]
    for u in ups:
        if u.rejection:
            return PodResult(phase, split=first.split, rejection=u.rejection)
    n = len(first.chips)
    args = lambda k: [u.chips[k] for u in ups] + ([chip_model(m, first.split, k)] if m is not None else [])
    return _collect(phase, first.split, [fn(*args(k)) for k in range(n)])

"""The whole compiler on one screen: the phases in order, each a plain function of
its upstream results and the config (a dict with groups model, target, policy).

A phase that finds the trial does not fit returns a result carrying a Rejection;
the later phases pass it through (docs/architecture.md §3)."""
from __future__ import annotations

from dataclasses import dataclass

from . import mapper as mappers
from . import models, reference
from .expand import expand
from .lower import lower
from .place.config import PlaceConfig
from .place.phase import place
from .plan import plan
from .policy import Policy
from .report import report
from .run import run
from .schedule import schedule
from .target import Target


@dataclass
class ModelResult:
    graph: object
    data: dict
    rejection: object = None

    def metrics(self) -> dict:
        return {"name": self.graph.name, "tensors": len(self.graph.tensors), "ops": len(self.graph.ops),
                **getattr(self.graph, "meta", {})}


@dataclass
class ReferenceResult:
    """The numpy reference's graph outputs (f16) and the tolerance the run is held to: a
    phase of its own (0.66 TFLOP at 27 So400m layers), so the model phase is seeding and
    the graph only, and a trial's figures show what it costs."""
    outputs: dict
    tolerance: float
    rejection: object = None

    def metrics(self) -> dict:
        return {"tolerance": self.tolerance}


def model_phase(cfg):
    return ModelResult(*models.build(cfg["model"]))


def reference_phase(m: ModelResult) -> ReferenceResult:
    return ReferenceResult(*reference.reference_and_tolerance(m.graph, m.data))


def target_of(cfg) -> Target:
    return Target.from_dict(dict(cfg["target"]))


def policy_of(cfg) -> Policy:
    return Policy.from_dict(dict(cfg["policy"]))


def place_config(cfg) -> PlaceConfig:
    return PlaceConfig.from_dict(policy_of(cfg).place)


# name -> (upstream phases, function(upstream results..., cfg, mapper))
PHASES = {
    "model": ((), lambda cfg, mp: model_phase(cfg)),
    "reference": (("model",), lambda m, cfg, mp: reference_phase(m)),
    "plan": (("model",), lambda m, cfg, mp: plan(m, target_of(cfg), policy_of(cfg))),
    "expand": (("model", "plan"), lambda m, p, cfg, mp: expand(m, p, target_of(cfg), policy_of(cfg), mp)),
    "place": (("expand",), lambda e, cfg, mp: place(e, target_of(cfg), place_config(cfg), mp)),
    "schedule": (("place",), lambda pl, cfg, mp: schedule(pl, target_of(cfg))),
    "lower": (("place", "schedule"), lambda pl, s, cfg, mp:
              lower(pl, s, target_of(cfg), policy_of(cfg).exchange_table_cap)),
    "run": (("lower", "model", "reference"), lambda lo, m, ref, cfg, mp:
            run(lo, m, target_of(cfg), policy_of(cfg).check, ref=ref)),
    "report": (("model", "plan", "expand", "place", "schedule", "run"),
               lambda m, p, e, pl, s, r, cfg, mp: report(m, p, e, pl, s, r, target_of(cfg))),
}


def run_phase(name: str, results: dict, cfg: dict, mapper=mappers.serial):
    ups, fn = PHASES[name]
    return fn(*(results[u] for u in ups), cfg, mapper)


def compile_trial(cfg: dict, mapper=mappers.serial) -> dict:
    """All phases in-process; returns every phase's result by name."""
    results = {}
    for name in PHASES:
        results[name] = run_phase(name, results, cfg, mapper)
    return results

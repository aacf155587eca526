"""The whole compiler on one screen: the phases in order, each a plain function of
its upstream results and the config (a dict with groups model, target, policy).

A phase that finds the trial does not fit returns a result carrying a Rejection;
the later phases pass it through (docs/architecture.md §3)."""
from __future__ import annotations

from dataclasses import dataclass

from . import mapper as mappers
from .policy import Policy
from .target import ConfigError, Target

# Each phase's module is imported when the phase runs: a stage process (`python -m pipeline
# <phase>`) then loads only its own (the simulator's numba, OR-tools, plotly are ~1 s of start-up).


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
    fp16_outputs: dict | None = None      # FP8 activations: the same model's with FP16 ones
    fp8_activation_error: float | None = None   # ... and the rms error of `outputs` against them
    model_outputs: dict | None = None     # a tower's: the independent timm model's (compiler/model_check.py)
    layers: dict | None = None            # every Repeat iteration's layer output and its tolerance (tolerance.py)
    # ... and what each cast clipped on the trial's input (models/calibrate.py clipping): cast input ->
    # {"clipped": [count] fraction of real elements over 448 · scale, "peak": [count] max |x| / (448 · scale)}
    fp8_clipping: dict | None = None
    model_figures: dict | None = None     # a tower's: its FP16-activation evaluation against the model (model_check.figures)
    model_weights: dict | None = None     # ... and the device's weights against their source (model_check.weights_check)

    def metrics(self) -> dict:
        extra = {} if self.fp8_activation_error is None else {"fp8_activation_error": self.fp8_activation_error}
        if self.fp8_clipping:
            c = self.fp8_clipping
            extra["fp8_clipped_max"] = round(max(float(v["clipped"].max()) for v in c.values()), 9)
            extra["fp8_peak_max"] = round(max(float(v["peak"].max()) for v in c.values()), 6)
            extra |= {f"fp8_clipped.{n}": round(float(v["clipped"].max()), 9) for n, v in sorted(c.items())}
        return {"tolerance": self.tolerance, **extra}


def model_phase(cfg, mapper=mappers.serial):
    from . import models
    build = lambda mcfg: ModelResult(*models.build(mcfg))
    if dict(cfg["model"]).get("attention") == "auto":     # priced both ways by plan + expand
        from .attn_choice import choose
        return choose(cfg, mapper, build, run_phase)
    return build(cfg["model"])


def reference_phase(m: ModelResult) -> ReferenceResult:
    from . import compare, model_check, tolerance as checkpoints
    g, tower = m.graph, model_check.applies(m.graph)
    fp8 = checkpoints.casts(g)
    unrounded = {} if tower and not fp8 else None
    outputs, tolerance, layers = checkpoints.reference_checkpoints(g, m.data, unrounded)
    fp16 = compare.fp16_activations(g, m.data)
    err = None if fp16 is None else round(compare.rms_rel_error(g, outputs, fp16), 9)
    model, weights = model_check.outputs_and_weights(g, m.data)
    figs = None
    if model is not None:       # the FP16-activation evaluation against the model (model_check.py)
        r, u = model_check.fp16_evaluations(g, m.data, *((None, None) if fp8 else (outputs, unrounded)))
        figs = model_check.figures(g, r, u, model)
    clip = None
    if fp8:                     # one more evaluation, observing each cast's input
        from .models.calibrate import clipping
        clip = clipping(g, m.data)[0]
    return ReferenceResult(outputs, tolerance, fp16_outputs=fp16, fp8_activation_error=err, layers=layers,
                           model_outputs=model, model_figures=figs, fp8_clipping=clip, model_weights=weights)


def target_of(cfg) -> Target:
    """One chip's machine; a multi-chip target's `pod` key is read by compiler/pod (and checked here)."""
    from .pod import chip_dict, pod_of
    pod_of(cfg["target"])
    return Target.from_dict(chip_dict(dict(cfg["target"])))


def chip_target(cfg) -> Target:
    """target_of for what only one chip's tiles can run (policy.pipeline_groups)."""
    if "pod" in cfg["target"]:
        raise ConfigError("policy.pipeline_groups pipelines one chip's tiles: set it to 0 for a pod target "
                          "(target.pod pipelines over chips)")
    return target_of(cfg)


def policy_of(cfg) -> Policy:
    return Policy.from_dict(dict(cfg["policy"]))


def place_config(cfg):
    from .place.config import PlaceConfig
    return PlaceConfig.from_dict(policy_of(cfg).place)


def _plan(m, cfg, mp):
    from .deferred_norm import device_model
    from .plan import plan
    return plan(device_model(m, policy_of(cfg).deferred_norm), target_of(cfg), policy_of(cfg))


def _expand(m, p, cfg, mp):
    from .deferred_norm import device_model
    from .expand import expand
    return expand(device_model(m, policy_of(cfg).deferred_norm), p, target_of(cfg), policy_of(cfg), mp)


def _place(e, cfg, mp):
    from .place.phase import place
    return place(e, target_of(cfg), place_config(cfg), mp)


def _schedule(pl, cfg, mp):
    from .schedule import schedule
    return schedule(pl, target_of(cfg))


def _lower(pl, s, cfg, mp):
    from .lower import lower
    return lower(pl, s, target_of(cfg), policy_of(cfg).exchange_table_cap)


def _run(lo, m, ref, cfg, mp):
    from .run import run
    p = policy_of(cfg)
    return run(lo, m, target_of(cfg), p.check, ref=ref, fp8_budget=(p.fp8_budget_embedding, p.fp8_budget_features),
               check_exchanges=p.check_exchanges)


def _report(m, p, e, pl, s, r, cfg, mp):
    from .report import report
    return report(m, p, e, pl, s, r, target_of(cfg))


# name -> (upstream phases, function(upstream results..., cfg, mapper))
PHASES = {
    "model": ((), lambda cfg, mp: model_phase(cfg, mp)),
    "reference": (("model",), lambda m, cfg, mp: reference_phase(m)),
    "plan": (("model",), _plan),
    "expand": (("model", "plan"), _expand),
    "place": (("expand",), _place),
    "schedule": (("place",), _schedule),
    "lower": (("place", "schedule"), _lower),
    "run": (("lower", "model", "reference"), _run),
    "report": (("model", "plan", "expand", "place", "schedule", "run"), _report),
}


def _spatial(name: str, results: dict, cfg: dict, mapper):
    """The spatial pipeline's plan, expand and run (compiler/spatial.py); place, schedule,
    lower and report are the single-chip ones. policy.pipeline_groups=G plans G groups;
    auto plans the family its cost picks (compiler/family.py), a PlanResult or a
    SpatialPlan; expand follows the plan's type, run the lowered program's groups."""
    from . import spatial
    r, t, p = results, chip_target(cfg), policy_of(cfg)
    if name == "plan":
        if p.pipeline_groups == "auto":
            from .family import FAMILY_KEY, plan_family, price
            return plan_family(r["model"], t, p, cfg.get(FAMILY_KEY) or price(r["model"], t, p, mapper))
        return spatial.plan_phase(r["model"], t, p, p.pipeline_groups)
    if name == "expand":
        if not isinstance(r["plan"], spatial.SpatialPlan):        # auto chose the whole chip
            return _expand(r["model"], r["plan"], cfg, mapper)
        return spatial.expand_phase(r["model"], r["plan"], t, p, mapper)
    lo, m, ref = r["lower"], r["model"], r["reference"]
    if not lo.pipeline_groups:                                    # auto chose the whole chip (or rejected)
        return _run(lo, m, ref, cfg, mapper)
    from .run import run
    host = spatial.Host(m, lo, lo.pipeline_groups, [m.data[spatial.image_name(m.graph)]], [ref], p.deferred_norm,
                        p.check_exchanges, p.check)
    return run(lo, m, t, p.check, ref=ref, fp8_budget=(p.fp8_budget_embedding, p.fp8_budget_features), host=host)


def run_phase(name: str, results: dict, cfg: dict, mapper=mappers.serial):
    if policy_of(cfg).pipeline_groups and name in ("plan", "expand", "run"):
        return _spatial(name, results, cfg, mapper)
    if "pod" in cfg["target"] and name not in ("model", "reference"):   # several chips: compiler/pod
        from .pod import pod_phase
        return pod_phase(name, results, cfg, mapper,
                         {"expand": _expand, "place": _place, "schedule": _schedule, "lower": _lower},
                         target_of(cfg), policy_of(cfg))
    ups, fn = PHASES[name]
    return fn(*(results[u] for u in ups), cfg, mapper)


def compile_trial(cfg: dict, mapper=mappers.serial) -> dict:
    """All phases in-process; returns every phase's result by name."""
    results = {}
    for name in PHASES:
        results[name] = run_phase(name, results, cfg, mapper)
    return results

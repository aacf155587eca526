"""`policy.pipeline_groups=auto`: the plan family (the whole chip, or a spatial pipeline of G
tile groups) chosen by cost (issue #27).

The two families are different programs: the whole chip runs the trial's batch through
every layer on every tile; a pipeline of G groups (compiler/spatial.py) runs the batch as
one item streaming through G groups of tiles // G tiles. Their figures are not one number:
the pipeline's images/s is one item a pipeline step while its latency is G steps, so the
choice needs an objective (`policy.objective`): `throughput` (most images/s) or `latency`
(least ms from first image in to last output out).

Each candidate is priced by the phases that build it, on the trial's own model, target and
policy: the whole chip by plan + expand (its best finalist's exact cycles, which the
simulator reproduces, plus the host link as compiler/run.py `throughput` counts it); a
pipeline by spatial.plan_phase + expand_phase (the merged chip program's exact cycles,
its groups' finalists already checked to place) and spatial.throughput. Candidates: every
G that divides the encoder's layers with 2 <= G <= `policy.pipeline_max_groups`. A
rejected candidate loses (its reason is kept); ties go to fewer groups (the whole chip
first: no fill or drain, the least latency). If every candidate is rejected, the whole chip's
rejection goes on, for the later phases to report.

The plan phase returns the winner's own plan result (PlanResult or SpatialPlan: expand
follows its type), its `family` field saying what was chosen and why (metrics/plan.json
`family.*`). Costs host time: every candidate is planned and expanded, then the winner once
more. Under DVC the pricing is a stage of its own before plan (`python -m pipeline.family`,
instant unless auto; FAMILY_KEY hands its doc to the plan phase), so a policy key that only
expand reads reruns the pricing but not the plan stage unless the pick changes."""
from __future__ import annotations

from dataclasses import replace

from .target import ConfigError, Target

FAMILY_KEY = "family_choice"   # under DVC: the family stage's doc (price's), handed to the plan phase


def group_counts(model, most: int) -> list[int]:
    """Pipeline group counts to price: divisors of the Repeat's layers in [2, most]."""
    rep = model.graph.repeat
    L = rep.count if rep and rep.carried else 0
    return [G for G in range(2, min(most, L) + 1) if L % G == 0]


def _whole_chip(model, t: Target, policy, mapper):
    from .deferred_norm import device_model
    from .expand import expand
    from .plan import plan
    from .run import throughput
    dm = device_model(model, policy.deferred_norm)
    p = plan(dm, t, policy)
    if p.rejection:
        return p.rejection, {}
    e = expand(dm, p, t, policy, mapper)
    if e.rejection:
        return e.rejection, {}
    cycles = int(e.finalists[0].analysis["cycles"])
    return None, {"cycles": cycles, **throughput(model.graph, t, cycles)}


def _pipeline(model, t: Target, policy, G: int, mapper):
    from . import spatial
    sp = spatial.plan_phase(model, t, policy, G)
    if sp.rejection:
        return sp.rejection, {}
    e = spatial.expand_phase(model, sp, t, policy, mapper)
    if e.rejection:
        return e.rejection, {}
    cycles = int(e.finalists[0].analysis["cycles"])
    images = model.graph.meta.get("images") or 1
    return None, {"cycles": cycles, **spatial.throughput(t, cycles, sp.images + G - 1, G, images)}


def price(model, t: Target, policy, mapper) -> dict:
    """{"objective", "pipeline_groups": the pick (0: the whole chip), "candidates": {G: figures
    or {"rejected": why}}}."""
    if not model.graph.meta.get("images"):
        raise ConfigError(f"policy.pipeline_groups=auto: graph {model.graph.name} is not an image tower "
                          f"(no batch to stream); set policy.pipeline_groups=0")
    priced = {0: _whole_chip(model, t, policy, mapper)}
    for G in group_counts(model, policy.pipeline_max_groups):
        priced[G] = _pipeline(model, t, policy, G, mapper)
    fits = {G: f for G, (rej, f) in priced.items() if rej is None}
    if policy.objective == "throughput":
        key = lambda G: (-fits[G]["images_per_s"], G)
    else:
        key = lambda G: (fits[G]["latency_ms"], G)
    return {"objective": policy.objective, "pipeline_groups": min(fits, key=key) if fits else 0,
            "candidates": {str(G): f or {"rejected": f"{rej.phase} ({rej.reason}): {rej.message}"}
                           for G, (rej, f) in priced.items()}}


def plan_family(model, t: Target, policy, doc: dict):
    """The plan result of doc's pick (price's), its `family` field the doc."""
    from . import spatial
    G = doc["pipeline_groups"]
    if G:
        return replace(spatial.plan_phase(model, t, policy, G), family=doc)
    from .deferred_norm import device_model
    from .plan import plan
    return replace(plan(device_model(model, policy.deferred_norm), t, policy), family=doc)

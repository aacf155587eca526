"""`model.attention=auto`: materialized or split-key (flash) attention, chosen by cost.

The two lower to different graphs (materialized: scores MATMUL, SOFTMAX, P·V MATMUL with S
and P as tensors; flash: one flash_attention op, S and P never stored), so the choice
cannot be a grid inside plan: every later phase (expand, place, lower, run's read-back,
the report) works on the graph the model phase hands on. So the model phase builds both
variants and runs plan and expand on each, with the trial's own target and policy, and
keeps the variant whose best finalist expand prices cheaper (its exact cycles, which the
simulator reproduces: tests hold them equal). Nothing is decided by name, depth or batch.
Ties go to materialized (its S and P are checked op by op). A variant that plan or expand
rejects loses; if both are rejected, materialized goes on, for the later phases to report.

The graph's meta records both figures (`attention`, `attention_cycles.materialized`,
`attention_cycles.flash`: metrics/model.json), so a trial says what it chose and why.
Costs host time: plan and expand run once more per variant. Under DVC the pricing is a
stage of its own before the model stage (`python -m pipeline.attention`, reading the
model, target and policy keys; instant unless auto), so a policy change never reruns the
model stage unless the pick changes."""
from __future__ import annotations

from .target import ConfigError

VARIANTS = ("materialized", "flash")
CHOICE_KEY = "attention_choice"   # under DVC: the attention stage's pick, handed to the model phase


def price(cfg: dict, mapper, build, run_phase) -> dict:
    """{"attention": the cheaper variant, "cycles": {variant: expand's cycles or None}}.
    build(model cfg) -> ModelResult; run_phase: phases.run_phase (passed in: phases
    imports this module)."""
    if "pod" in dict(cfg["target"]):
        raise ConfigError("model.attention=auto prices one chip's program: name materialized or flash "
                          "for a pod target (target.pod)")
    cycles = {v: _cycles(build({**dict(cfg["model"]), "attention": v}), cfg, mapper, run_phase) for v in VARIANTS}
    priced = {v: c for v, c in cycles.items() if c is not None}
    pick = min(priced, key=lambda v: (priced[v], VARIANTS.index(v))) if priced else VARIANTS[0]
    return {"attention": pick, "cycles": cycles}


def choose(cfg: dict, mapper, build, run_phase):
    """The ModelResult of the cheaper variant, its graph's meta saying what was chosen and
    why. cfg[CHOICE_KEY], when present (the attention stage's output under DVC), is the
    pricing already done."""
    doc = cfg.get(CHOICE_KEY) or price(cfg, mapper, build, run_phase)
    m = build({**dict(cfg["model"]), "attention": doc["attention"]})
    m.graph.meta["attention"] = doc["attention"]
    for v in VARIANTS:
        m.graph.meta[f"attention_cycles.{v}"] = doc["cycles"][v]      # None: rejected
    return m


def _cycles(m, cfg, mapper, run_phase) -> int | None:
    """expand's exact cycles of the variant's best finalist (None when rejected)."""
    if m.rejection:
        return None
    res = {"model": m}
    for ph in ("plan", "expand"):
        res[ph] = run_phase(ph, res, cfg, mapper)
        if res[ph].rejection:
            return None
    return int(res["expand"].finalists[0].analysis["cycles"])

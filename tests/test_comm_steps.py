"""experiments/comm/steps.py: the per-op split of a Repeat body's cycles (exchange, AMP,
vector, COPY, sync) adds up, op by op, to the supersteps' cycles analysis.step_cycles
states, and it names the ring's local copies as COPY (none without ring homes)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from compiler.phases import run_phase, target_of
from helpers import target_cfg

_p = Path(__file__).resolve().parents[1] / "experiments" / "comm" / "steps.py"
_spec = importlib.util.spec_from_file_location("comm_steps", _p)
steps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(steps)

VIT = dict(name="vit", preset="custom", width=128, hidden=256, heads=2, tokens=16, layers=2)


def expanded(policy: dict):
    cfg = dict(model=VIT, target=target_cfg("tiny"), policy=policy)
    r = {"model": run_phase("model", {}, cfg)}
    r["plan"] = run_phase("plan", r, cfg)
    r["expand"] = run_phase("expand", r, cfg)
    return r["model"].graph, r["expand"], target_of(cfg)


@pytest.mark.parametrize("ring", [True, False])
def test_split_adds_up_to_the_steps(ring):
    g, e, t = expanded(dict(weight_stationary=False, ring_homes=ring))
    out = steps.report(g, e, t, verbose=True)
    f = e.finalists[0]
    tg, cyc = f.tilegraph, f.analysis["step_cycles"]
    b0, b1 = tg.body_steps()
    assert out["body"] == int(cyc[b0:b1].sum())
    for name, parts in out["split"].items():       # each op: the steps it opened, by kind
        assert sum(parts.values()) == sum(out["ops"][name].values()), name
    ex = {s for s in range(b0, b1) if tg.steps[s] == "exchange"}
    assert sum(p["exchange"] + p["sync"] for p in out["split"].values()) >= sum(int(cyc[s]) for s in ex)
    copies = sum(p["copy"] for p in out["split"].values())
    rings = any(gr.ring and not gr.inplace for _, gr in f.candidate.strategy)   # pieces read in place: no COPY
    assert (copies > 0) == rings, (copies, f.candidate.label)
    if not ring:
        assert copies == 0

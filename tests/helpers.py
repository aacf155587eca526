"""Shared test helpers: configs for in-process trials."""
from __future__ import annotations

import yaml

from conftest import REPO


def target_cfg(name: str = "tiny") -> dict:
    return yaml.safe_load((REPO / "conf" / "target" / f"{name}.yaml").read_text())


def cfg(target: str = "tiny", policy: dict | None = None, **model) -> dict:
    m = dict(name="gemm", m=32, k=64, n=64, dtype="f16", seed=0)
    m.update(model)
    return dict(model=m, target=target_cfg(target), policy=dict(policy or {}))


def set_cost_term(monkeypatch, name: str, value) -> None:
    """Replace one term of the cost model (compiler/costs/: a function, PERF, a constant) in every
    module that binds the name, so each caller sees the mutant whichever module it reads it from."""
    from compiler.costs import amp, vector, vertices
    hit = [m for m in (amp, vertices, vector) if name in vars(m)]
    assert hit, f"no cost term {name!r}"
    for m in hit:
        monkeypatch.setattr(m, name, value)


def cost_term(name: str):
    """The unmutated cost term `name` of compiler/costs/, whichever module defines it."""
    from compiler.costs import amp, vector, vertices
    return next(vars(m)[name] for m in (amp, vertices, vector) if name in vars(m))


def trial_ok(r) -> bool:
    """An in-process trial validated, and the simulator ran every superstep in the cycles
    expand computed (local COPYs and moved transfers included)."""
    m, tg = r["run"].metrics(), r["place"].tilegraph
    return (r["report"].summary["status"] == "ok" and m["validated"] and m["ops_failed"] == 0
            and r["run"].cycles_per_step == [int(c) for c in tg.analysis["step_cycles"]] * tg.count
            and r["run"].cycles == tg.analysis["cycles"])


def finalist_grids(r):
    """The first finalist's grid per op."""
    return [g for _, g in r["expand"].finalists[0].candidate.strategy]


def flag_validates_cheaper(off, on) -> None:
    """Two in-process trials, a policy flag off and on: both validate op by op in the cycles
    expand computed, and on is fewer cycles."""
    for r in (off, on):
        m = r["run"].metrics()
        assert r["run"].validated and m["ops_failed"] == 0 and m["ops_checked"] > 0, r["run"].failed
        assert m["cycles"] == r["expand"].metrics()["cycles"]
    assert on["expand"].metrics()["cycles"] < off["expand"].metrics()["cycles"]


def plan_prices_expand(off, on) -> None:
    """Same grids off and on; the plan's estimate falls by what expand's exact body cycles fall."""
    (p0, p1), (e0, e1) = ((r["plan"].candidates[0].cycles for r in (off, on)),
                          (r["expand"].finalists[0].analysis["body_cycles"] for r in (off, on)))
    assert [g.label for _, g in off["plan"].candidates[0].strategy] == \
        [g.label for _, g in on["plan"].candidates[0].strategy]
    assert p0 - p1 == e0 - e1 > 0


def kernel_flags(r, op):
    """The flags (dtype's high half) of the first finalist's kernels of opcode `op`."""
    k = r["expand"].finalists[0].tilegraph.kern
    return k["dtype"][k["op"] == op] >> 16


def tiny_trial(model: dict, **policy):
    """Every phase in-process on the tiny target, every row read back (policy.check=all)."""
    from compiler.phases import compile_trial
    return compile_trial(dict(model=model, target=target_cfg("tiny"), policy={"check": "all", **policy}))

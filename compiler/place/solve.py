"""solve(): the per-tile pipeline. Cheapest first, stop at the first answer:

  1. check the input (bad input raises ProblemError naming the request);
  2. live-byte lower bound -> INFEASIBLE with the proof's figures;
  3. greedy orders (online, lifetime, alignment, end-first) -> PLACED;
  4. the requests live at every event pinned first, the rest searched per part
     (`pin_whole_lifetime`, pinned.py); failing that, the whole tile:
     per independent part (time sections no request crosses): address-domain
     search, then the canonical search, each under its named budgets;
  5. tiles outside the compiled kernels' class (bank edges, several windows):
     CP-SAT on the whole tile (`cpsat_fallback`) -> PLACED | INFEASIBLE;
  6. otherwise UNKNOWN, reporting the best failed greedy attempt.
"""
from __future__ import annotations

import time

import numpy as np

from . import bound, greedy, pinned
from .validate import validate
from .config import PlaceConfig
from .instance import Instance
from .problem import INFEASIBLE, PLACED, UNKNOWN, Problem, Solution, check


def solve(problem: Problem, cfg: PlaceConfig | None = None) -> Solution:
    cfg = cfg or PlaceConfig()
    t0 = time.perf_counter()
    check(problem)
    n = len(problem)
    inst = Instance(problem)

    def done(status, addr, method, **kw):
        a = np.asarray(addr if addr is not None else [-1] * n, np.int64)
        return Solution(status, a, method=method, seconds=time.perf_counter() - t0, **kw)

    if n == 0:
        return done(PLACED, [], "empty")
    if cfg.lower_bound:
        proof = bound.prove(inst)
        if proof is not None:
            return done(INFEASIBLE, None, f"bound-{proof.kind}", event=proof.event,
                        live_bytes=proof.live_bytes, available_bytes=proof.available_bytes,
                        request=proof.request, detail={"proof": proof.kind})

    best = None  # (placed count, failed request, addr) of the best failed greedy attempt
    tried = []
    for name, order in greedy.orders(inst, cfg):
        addr, failed = greedy.place_order(inst, order)
        tried.append(name)
        if failed < 0:
            return done(PLACED, addr, name, detail={"tried": tried})
        k = sum(a >= 0 for a in addr)
        if best is None or k > best[0]:
            best = (k, failed, addr)

    nodes = 0
    detail = {"tried": tried}
    from . import search as _search  # the searches live in their own module
    fallback = (cfg.cpsat_fallback and n <= cfg.cpsat_max_requests
                and not _search.kernel_class(inst))
    scfg = cfg
    if fallback and cfg.time_limit_s is not None:   # the searches get a share, CP-SAT the rest
        scfg = cfg.override(time_limit_s=cfg.time_limit_s * cfg.cpsat_search_share)
    if cfg.pin_whole_lifetime:
        pcfg = scfg if scfg.time_limit_s is None else scfg.override(time_limit_s=scfg.time_limit_s * cfg.pin_time_share)
        got = _pinned(problem, inst, pcfg, t0)
        if got is not None:
            return done(PLACED, got[0], got[1], nodes=got[2], detail=detail)
    res = _search.run(inst, scfg, t0, best[2] if best else None)
    nodes = res.nodes
    detail.update(res.detail)
    if res.addr is None and res.proof is None and fallback:
        sol = _cpsat(problem, cfg, t0)
        if sol is not None:
            if sol.status == PLACED:
                return done(PLACED, sol.addr, "cpsat", nodes=nodes, detail=detail)
            ev, live, avail = bound.peak(inst)
            return done(INFEASIBLE, None, "cpsat-infeasible", nodes=nodes, event=ev,
                        live_bytes=live, available_bytes=avail, detail=detail)
    if res.addr is not None:
        return done(PLACED, res.addr, res.method, nodes=nodes, detail=detail)
    if res.proof is not None:
        return done(INFEASIBLE, None, res.method, nodes=nodes, event=res.proof.event,
                    live_bytes=res.proof.live_bytes, available_bytes=res.proof.available_bytes,
                    request=res.proof.request, detail=detail)
    failed = best[1] if best else -1
    ev, live, avail = bound.peak(inst)
    if failed >= 0:
        ev = inst.start[failed]
        mask = (problem.start <= ev) & (problem.end > ev)
        live = int(problem.extent[mask].sum())
    return done(UNKNOWN, None, "unknown", nodes=nodes, event=ev, live_bytes=live,
                available_bytes=avail, request=failed, detail=detail)


def _pinned(problem, inst, cfg, t0):
    """(addresses, method, nodes) with the whole-lifetime requests pinned, or None."""
    from . import search as _search  # the searches live in their own module
    addr = pinned.pin(problem, inst)
    if addr is None:
        return None
    q, rest = pinned.residual(problem, addr)
    res = _search.run(Instance(q), cfg, t0)
    if res.addr is None:             # not a proof for the tile: the pins may be what failed
        return None
    out = pinned.merged(problem, addr, rest, res.addr)
    return None if out is None else (out, f"pinned+{res.method}", res.nodes)


def _cpsat(problem, cfg, t0):
    """`cpsat_fallback`: the tile's CP-SAT answer (PLACED or INFEASIBLE), or None
    (unknown, out of time, or OR-Tools missing). One worker: the machine's cores
    are shared, and one worker under a deterministic limit is reproducible."""
    if cfg.time_limit_s is None:
        wall, det = 1e9, cfg.cpsat_deterministic_s
    else:
        wall, det = cfg.time_limit_s - (time.perf_counter() - t0), None
        if wall <= 0.05:
            return None
    from .cpsat import solve_cpsat
    try:
        sol = solve_cpsat(problem, time_limit_s=wall, workers=1, deterministic_s=det)
    except ImportError:
        return None
    if sol.status == PLACED and validate(problem, sol.addr):
        return None       # a model that disagrees with the validator is not trusted
    return None if sol.status == UNKNOWN else sol

"""How far re-timing the movable gathers could shorten a layer: a linear-programming
bound for early gathers, split gathers and cross-iteration prefetch alike.

    python experiments/comm/overlap.py [--same] [key=value ...]

(--same: only the `same` window; the 27-layer `prefetch` program is the larger one.)

An exchange step lasts as long as its busiest tile (docs/architecture.md §2), so the
gathers expand/early.py may move (a matmul's B, a bias's slices, a LayerNorm's γ/β)
can hide in other steps only where their sender and receiver both have room. This
script takes the best finalist's tile graph of the Repeat body with each movable
gather's transfer rows back in the step that built them (expand/graph.py records
them; early_gathers' own moves are undone), and solves, with scipy's HiGHS,

    min  Σ_s λ_s   over the body's exchange steps s
    s.t. every tile's sent and received bytes in s  ≤ λ_s,
         each movable row split in any fractions over the steps of its window,

over the weights' B gathers (weight_gather; the bias and γ/β gathers stay where
early_gathers put them: an LP over all of them took > 2 GiB), for two windows: `same` (after its source is complete, up to its own step: what
early_gathers and any split of it may use) and `prefetch` (parameters: any exchange
step of the body, as if layer i+1's weights were fetched during layer i). Fractions
are finer than any transfer row, so the bound holds for every re-timing of these
bytes; it prints the body's cycles as built, after early_gathers, and at each bound.
Nothing else moves: the other transfers, the compute steps and the syncs are as
expand built them. Observes expand only (wraps early_gathers to read its input)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import compiler.expand.graph as G  # noqa: E402
from compiler.phases import policy_of, run_phase, target_of  # noqa: E402
from pipeline.config import compose  # noqa: E402


def weight_gather(tg, record) -> bool:
    """A movable record (expand/graph.py Ctx.may_move) of a parameter gathered into a
    matmul's b operand (requests `<output>.b`; a bias's and a LayerNorm's γ/β gathers
    write `.bias` / `.gamma_beta`), inside the Repeat body."""
    r0, r1, dst, step, ready = record
    names = {tg.names[k] for k in tg.req["name"][np.asarray(dst).ravel()]}
    return r1 > r0 and ready <= tg.body_steps()[0] and all(n.endswith(".b") for n in names)


def built(graph, cand, t, policy):
    """(tile graph after early_gathers, the transfer steps before it, movable records)."""
    seen = {}
    inner = G.early_gathers

    def spy(tg, movable, target, *a):
        seen["steps"], seen["movable"] = tg.xfer["step"].copy(), list(movable)
        return inner(tg, movable, target, *a)
    G.early_gathers = spy
    try:
        tg = G.expand_graph(graph, cand.grids, t, policy, cand.label, cand.resident)
    finally:
        G.early_gathers = inner
    return tg, seen.get("steps", tg.xfer["step"].copy()), seen.get("movable", [])


def bound(tg, steps0, movable, t, window: str) -> float:
    """Least Σ over body exchange steps of their busiest tile's bytes / rate + phase."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, vstack
    x, T = tg.xfer, tg.tiles
    nb = (x["s_row_bytes"] * x["s_rows"]).astype(float)
    b0, b1 = tg.body_steps()
    E = [s + 1 for s in range(b0, b1) if tg.steps[s] == "exchange"]
    pos = {s: i for i, s in enumerate(E)}
    mov = np.zeros(len(nb), bool)
    var_p, var_step, p_src, p_dst, p_b = [], [], [], [], []
    for r0, r1, dst, step, ready in movable:
        if step not in pos or not weight_gather(tg, (r0, r1, dst, step, ready)):
            continue                                  # not a weight's B gather: stays where expand put it
        mov[r0:r1] = True
        if window == "prefetch" and ready <= b0:       # a parameter: any step of the body
            win = E
        else:
            win = [s for s in E if ready < s <= step]
        # rows of one gather between the same two tiles are interchangeable: one variable set
        pair, inv = np.unique(x["src"][r0:r1] * T + x["dst"][r0:r1], return_inverse=True)
        first = sum(len(v) for v in p_b)
        p_src.append(pair // T)
        p_dst.append(pair % T)
        p_b.append(np.bincount(inv, nb[r0:r1]))
        for s in win:
            var_p.append(first + np.arange(len(pair)))
            var_step.append(np.full(len(pair), pos[s]))
    rows, ys = np.concatenate(var_p), np.concatenate(var_step)
    p_src, p_dst, p_b = np.concatenate(p_src), np.concatenate(p_dst), np.concatenate(p_b)
    n, S = len(rows), len(E)
    steps0 = np.where(mov, steps0, x["step"])        # the others as early_gathers left them
    fixed = ~mov & np.isin(steps0, E)
    A, b = [], []
    for side, tile_of in (("src", p_src), ("dst", p_dst)):
        load = np.zeros((S, T))
        np.add.at(load, (np.searchsorted(E, steps0[fixed]), x[side][fixed]), nb[fixed])
        key = ys * T + tile_of[rows]
        m = coo_matrix((p_b[rows], (key, np.arange(n))), shape=(S * T, n + S)).tocsr()
        lam = coo_matrix((-np.ones(S * T), (np.arange(S * T), n + np.repeat(np.arange(S), T))),
                         shape=(S * T, n + S)).tocsr()
        A.append(m + lam)
        b.append(-load.ravel())
    r_ids = np.unique(rows, return_inverse=True)[1]
    eq = coo_matrix((np.ones(n), (r_ids, np.arange(n))), shape=(r_ids.max() + 1, n + S))
    c = np.concatenate([np.zeros(n), np.ones(S)])
    res = linprog(c, A_ub=vstack(A).tocsr(), b_ub=np.concatenate(b), A_eq=eq, b_eq=np.ones(eq.shape[0]),
                  bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"overlap bound: {res.message}")
    lam = res.x[n:]
    return float(sum(t.exchange_phase_cycles + v / t.exchange_bytes_per_cycle for v in lam))


def body_exchange(tg, steps, t) -> int:
    x, T = tg.xfer, tg.tiles
    nb = x["s_row_bytes"] * x["s_rows"]
    b0, b1 = tg.body_steps()
    tot = 0
    for s in range(b0, b1):
        if tg.steps[s] == "exchange":
            sel = steps == s + 1
            tot += t.exchange_cycles(np.bincount(x["src"][sel], nb[sel], minlength=T),
                                     np.bincount(x["dst"][sel], nb[sel], minlength=T))
    return tot


def main(argv):
    windows = ("same",) if "--same" in argv else ("same", "prefetch")
    argv = [a for a in argv if a != "--same"]
    cfg = compose(["model=vit", "target=ipu21", *argv])
    res = {"model": run_phase("model", {}, cfg)}
    res["plan"] = run_phase("plan", res, cfg)
    res["expand"] = run_phase("expand", res, cfg)
    f = res["expand"].finalists[0]
    t, policy = target_of(cfg), policy_of(cfg)
    tg, steps0, movable = built(res["model"].graph, f.candidate, t, policy)
    body = int(f.analysis["body_cycles"])
    ex0, ex1 = body_exchange(tg, steps0, t), body_exchange(tg, tg.xfer["step"], t)
    out = {"overrides": argv, "candidate": f.candidate.label, "body_cycles": body,
           "exchange_phases_as_built": ex0, "exchange_phases_early_gathers": ex1}
    for w in windows:
        lb = bound(tg, steps0, movable, t, w)
        out[f"exchange_phases_bound_{w}"] = round(lb, 1)
        out[f"body_cycles_bound_{w}"] = int(np.floor(body - (ex1 - lb)))
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

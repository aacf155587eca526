"""Where one layer's cycles go, by graph op and by kind (matmul, vector, exchange,
sync), as PopVision's execution view breaks a program down.

The simulator measures cycles per superstep and per tile (run.cycles_per_step,
run.tile_cycles) and knows no graph; the schedule's metadata maps them back:
  * sync: every superstep's sync cycles go to the op that opened the step (step_op);
  * exchange: an exchange step's phase goes to the ops whose transfers it carries,
    in proportion to their bytes (a transfer's destination buffer names its op);
  * compute: a compute step lasts as long as its busiest tile (measured); that tile's
    kernels (the schedule's activities) share its measured cycles in proportion to
    their modelled cycles: MATMUL as matmul, every other kernel (COPY included) as vector.
Buffer names are a tensor name, optionally with one suffix ("qkv.xw.p": the partials of
op output "qkv.xw"), or "a@b" (a converted for the op producing b); a name that maps to
no op output (a parameter home) is charged to the step's opener.

"One layer" is the last Repeat iteration (the supersteps run.cycles_per_layer sums): the
body's static steps, measured in that iteration's run steps; the steps a tower runs once
before and after the Repeat (patch embedding, head) are not part of it (their ops' rows are
zero). Without a Repeat, the whole program.
"""
from __future__ import annotations

import numpy as np

from .. import isa

KINDS = ("matmul", "vector", "exchange", "sync")


def op_of_names(graph, names: list[str]) -> np.ndarray:
    """Index of the op each buffer name serves, -1 for none."""
    out = {o: i for i, op in enumerate(graph.ops) for o in op.outputs}
    res = []
    for n in names:
        if "@" in n:
            n = n.split("@", 1)[1]
        if n not in out and "." in n:
            n = n.rsplit(".", 1)[0]
        res.append(out.get(n, -1))
    return np.asarray(res, np.int64)


def layer_steps(tg, S: int) -> tuple[int, int]:
    """Static steps [b0, b1) of one layer: the Repeat body's, or all S without one."""
    body = getattr(tg, "body", None)
    return (int(body[0]), int(body[1])) if body else (0, S)


def op_breakdown(graph, tg, sched, run_res, sync_cycles: int) -> np.ndarray:
    """cycles[op, kind] of one layer (float, sums to run.cycles_per_layer)."""
    S = len(sched.kinds)
    b0, b1 = layer_steps(tg, S)
    # static step j of the body ran last as run step j + (count - 1)·(b1 - b0)
    shift = (max(int(getattr(tg, "count", 1) or 1), 1) - 1) * (b1 - b0)
    cyc = np.zeros(S, np.int64)
    cyc[b0:b1] = np.asarray(run_res.cycles_per_step, np.int64)[b0 + shift:b1 + shift]
    tc = np.zeros((S, np.asarray(run_res.tile_cycles).shape[1]))
    tc[b0:b1] = np.asarray(run_res.tile_cycles)[b0 + shift:b1 + shift]
    n_ops = len(graph.ops)
    out = np.zeros((n_ops, len(KINDS)))
    opener = np.asarray(sched.step_op if len(sched.step_op) == S else [0] * S, np.int64)
    name_op = op_of_names(graph, sched.names)
    K = {k: i for i, k in enumerate(KINDS)}
    x = tg.xfer
    x_op = name_op[tg.req["name"][x["dreq"]]] if len(x["dreq"]) else np.zeros(0, np.int64)
    x_bytes = x["s_row_bytes"] * x["s_rows"]
    a = sched.act
    kern = a["kind"] == 0
    for j in range(b0, b1):
        sync = min(int(sync_cycles), int(cyc[j]))
        out[opener[j], K["sync"]] += sync
        busy = cyc[j] - sync
        if busy <= 0:
            continue
        if sched.kinds[j] == "exchange":
            sel = x["step"] == j + 1
            ops, nb = x_op[sel], x_bytes[sel].astype(float)
            ops = np.where(ops >= 0, ops, opener[j])
            if nb.sum() > 0:
                np.add.at(out[:, K["exchange"]], ops, busy * nb / nb.sum())
            else:
                out[opener[j], K["exchange"]] += busy
            continue
        t = int(np.argmax(tc[j]))
        sel = kern & (a["step"] == j + 1) & (a["tile"] == t)
        dur = (a["end"][sel] - a["start"][sel]).astype(float)
        if dur.sum() <= 0:
            out[opener[j], K["vector"]] += busy
            continue
        bufs = a["buf"][sel]
        ops = np.where(bufs >= 0, name_op[np.maximum(bufs, 0)], -1)
        ops = np.where(ops >= 0, ops, opener[j])
        kind = np.where(a["op"][sel] == isa.MATMUL, K["matmul"], K["vector"])
        np.add.at(out, (ops, kind), busy * dur / dur.sum())
    return out


def ops_table(graph, tg, sched, run_res, sync_cycles: int) -> list[tuple]:
    """Rows (op index, output name, op kind, cycles per KINDS..., total), integer cycles
    (rounded so that the rows sum exactly to the layer's cycles)."""
    c = op_breakdown(graph, tg, sched, run_res, sync_cycles)
    flat = np.floor(c).astype(np.int64).reshape(-1)
    short = int(round(c.sum())) - int(flat.sum())          # largest remainders get the leftover cycles
    if short > 0:
        frac = (c - np.floor(c)).reshape(-1)
        flat[np.argsort(-frac, kind="stable")[:short]] += 1
    c = flat.reshape(c.shape)
    return [(i, op.outputs[0], op.kind, *map(int, c[i]), int(c[i].sum())) for i, op in enumerate(graph.ops)]

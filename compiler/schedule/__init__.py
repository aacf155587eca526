"""schedule: bulk-synchronous supersteps and timed activities (docs/architecture.md §3).

Each superstep is compute or exchange, then a sync. Activities are listed in
chronological order: a tile's kernels run back to back from the start of their
superstep; an exchange occupies every tile taking part for the whole phase. A Repeat
body is scheduled once: its timeline is one iteration's.

Metadata for the profile (compiler/report/ops.py), never read by the simulator:
step_op is the graph op that opened each superstep (expand), and every kernel
activity names the buffer it writes (act["buf"], an index into names: tensor names
with a suffix, e.g. "qkv.xw.p" for the partials of op output "qkv.xw")."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import isa
from ..expand.analysis import kernel_cycles
from ..target import Target


@dataclass
class Schedule:
    kinds: list[str]              # per superstep
    step_cycles: np.ndarray       # int64[steps], sync included
    step_start: np.ndarray        # int64[steps]
    act: dict                     # activities SoA: step, tile, kind(0 kernel / 1 exchange), op, start, end,
    #                               buf (kernels: names index of the buffer written; exchanges: -1)
    total_cycles: int              # all iterations of a Repeat body
    count: int = 1                 # Repeat iterations of the steps listed (1: no Repeat)
    rejection: object = None
    body_cycles: int = 0           # one iteration of the Repeat body (the steps before/after it excluded)
    step_op: list = field(default_factory=list)   # graph op index that opened each superstep
    names: list = field(default_factory=list)     # buffer names (TileGraph.names)

    def metrics(self) -> dict:
        return {"supersteps": len(self.kinds), "cycles": self.total_cycles, "repeat": self.count,
                "cycles_per_layer": self.body_cycles,
                "exchange_steps": self.kinds.count("exchange")}


def schedule(place_res, t: Target) -> Schedule:
    if place_res.rejection:
        return Schedule([], np.zeros(0, np.int64), np.zeros(0, np.int64), {}, 0, rejection=place_res.rejection)
    tg = place_res.tilegraph
    a = tg.analysis
    cyc = a["step_cycles"]
    start = np.concatenate([[0], np.cumsum(cyc)[:-1]]).astype(np.int64)
    k = tg.kern
    order = np.lexsort((np.arange(len(k["tile"])), k["tile"], k["step"]))
    kc = kernel_cycles(tg, t)[order]
    tile, step = k["tile"][order], k["step"][order]
    # end of each kernel = step start + running sum of this tile's kernels in the step
    grp = step * tg.tiles + tile
    csum = np.cumsum(kc)
    first = np.r_[True, grp[1:] != grp[:-1]]
    base = np.maximum.accumulate(np.where(first, csum - kc, 0))
    k_end = start[step - 1] + csum - base
    buf = tg.req["name"][out_request(k)[order]] if len(order) else np.zeros(0, np.int64)
    ex = [s for s in range(len(tg.steps)) if tg.steps[s] == "exchange"]
    ex_tiles = [np.flatnonzero(a["tile_cycles"][s]) for s in ex]
    act = dict(
        step=np.concatenate([step] + [np.full(len(x), s + 1) for s, x in zip(ex, ex_tiles)]),
        tile=np.concatenate([tile] + ex_tiles),
        kind=np.concatenate([np.zeros(len(tile), np.int64)] + [np.ones(len(x), np.int64) for x in ex_tiles]),
        op=np.concatenate([k["op"][order]] + [np.full(len(x), -1) for x in ex_tiles]),
        start=np.concatenate([k_end - kc] + [np.full(len(x), start[s]) for s, x in zip(ex, ex_tiles)]),
        end=np.concatenate([k_end] + [np.full(len(x), start[s] + cyc[s] - t.sync_cycles)
                                      for s, x in zip(ex, ex_tiles)]),
        buf=np.concatenate([buf] + [np.full(len(x), -1) for x in ex_tiles]))
    chrono = np.lexsort((act["tile"], act["start"]))
    act = {f: v[chrono].astype(np.int64) for f, v in act.items()}
    return Schedule(list(tg.steps), cyc, start, act, a["cycles"], tg.count, body_cycles=int(a["body_cycles"]),
                    step_op=list(tg.step_op), names=list(tg.names))


def out_request(k: dict) -> np.ndarray:
    """The request row each kernel writes: its "out" (or "dst") operand (isa.OPERANDS
    lists operands in the order of the tile graph's r0..r3)."""
    slot = np.zeros(len(k["op"]), np.int64)
    for op, names in isa.OPERANDS.items():
        slot[k["op"] == op] = next(i for i, n in enumerate(names) if n in ("out", "dst"))
    return np.choose(slot, [k["r0"], k["r1"], k["r2"], k["r3"]])

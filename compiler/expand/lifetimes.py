"""Lifetime check of a tile graph: every request a transfer or a kernel touches is live
(start <= step <= end) in the superstep that touches it.

Why: placement may give a request's bytes to another request outside its lifetime, so a
transfer that writes a buffer before its start (an early or split gather whose
destination's start was not moved with it) or reads one after its end is wrong data
that read-back catches only if placement happens to overlap the two. This check sees
it on every graph, from the raw columns alone (it shares no code with the passes that
set lifetimes: tilegraph.Builder.reads, early.py, split.py)."""
from __future__ import annotations

import numpy as np


def lifetime_faults(tg, limit: int = 5) -> list[str]:
    """Up to `limit` descriptions of a request touched outside its lifetime."""
    r, out = tg.req, []
    uses = [("transfer destination", tg.xfer["dreq"], tg.xfer["step"]),
            ("transfer source", tg.xfer["sreq"], tg.xfer["step"])]
    uses += [(f"kernel operand {f}", tg.kern[f], tg.kern["step"]) for f in ("r0", "r1", "r2", "r3")]
    if len(tg.bseg["req"]):
        uses.append(("b segment", tg.bseg["req"], tg.kern["step"][tg.bseg["kern"]]))
    for what, req, step in uses:
        req, step = np.asarray(req, np.int64), np.asarray(step, np.int64)
        on = req >= 0
        bad = np.flatnonzero(on & ((step < r["start"][np.where(on, req, 0)]) | (step > r["end"][np.where(on, req, 0)])))
        for i in bad[:limit - len(out)]:
            q = int(req[i])
            out.append(f"{what} row {int(i)}: request {q} ({tg.names[int(r['name'][q])]}, tile {int(r['tile'][q])}) "
                       f"touched in step {int(step[i])}, live {int(r['start'][q])}..{int(r['end'][q])}")
        if len(out) >= limit:
            break
    return out

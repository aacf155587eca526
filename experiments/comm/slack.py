"""Room for B gathers in earlier exchange steps (#26, policy.split_gathers).

    python experiments/comm/slack.py [key=value ...] [/ variant / ...]

For each variant's best finalist: per movable gather of the Repeat body (expand/matmul.py,
graph.py may_move: a matmul's B, a bias slice, a LayerNorm's gamma and beta), its step,
its bytes on its busiest receiver, the receivers at that step's max, and the room its
receivers have in the exchange steps between its ready step and its own (per step: the
step's busiest tile's bytes W less the tile's own received bytes; summed over the steps,
taken per receiver), then how much of the gather fits in that room: all receivers'
(min(own bytes, room) summed) and the busiest receiver's. Then per exchange step of the
body the median room on the receivers of the step's largest gather. Receive side only
(the B gathers' senders are far from the steps' max: steps.py -v). Read from the tile
graph as expand built it (after early_gathers, split_gathers if on), so with
split_gathers on it shows what was left. The last two columns bound what moving the
gather's transfers can save: the step's max less its max with each receiver's share
moved into its room (between its ready step and its own; or any other body step, as a
prefetch across Repeat iterations could). Gathers under 1 KiB a tile left out (-a: all)."""
from __future__ import annotations

import sys
import weakref
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand import graph as ex_graph  # noqa: E402
from compiler.expand.analysis import send_charge  # noqa: E402
from experiments.comm.steps import expanded  # noqa: E402

SEEN: dict[int, list] = {}


def _record(real):
    def spy(tg, movable, t, *a, **k):
        old = SEEN.get(id(tg))
        if old is None or old[0]() is not tg:                    # first of the two for this graph
            SEEN[id(tg)] = (weakref.ref(tg), [m[:2] + m[3:] for m in movable])          # (r0, r1, step, ready)
        return real(tg, movable, t, *a, **k)
    return spy


def room_table(g, tg, movable) -> list[dict]:
    x, T = tg.xfer, tg.tiles
    nb = x["s_row_bytes"] * x["s_rows"]
    ch = send_charge(tg)
    b0, b1 = tg.body_steps()
    recv, send = {}, {}
    for s in range(b0 + 1, b1 + 1):
        if tg.steps[s - 1] == "exchange":
            sel = x["step"] == s
            recv[s] = np.bincount(x["dst"][sel], nb[sel], minlength=T)
            send[s] = np.bincount(x["src"][sel], ch[sel], minlength=T)
    W = {s: max(recv[s].max(initial=0), send[s].max(initial=0)) for s in recv}
    rows = []
    for r0, r1, step, ready in movable:
        step = int(x["step"][r0]) if r1 > r0 else step
        if step not in recv or r1 <= r0:
            continue
        mine = np.bincount(x["dst"][r0:r1], nb[r0:r1], minlength=T)
        on = mine > 0
        room = np.zeros(T, np.int64) + sum(np.maximum(0, W[y] - recv[y]) for y in recv if ready < y < step)
        anywhere = np.zeros(T, np.int64) + sum(np.maximum(0, W[y] - recv[y]) for y in recv if y != step)
        busiest = int(np.argmax(recv[step]))
        bound = lambda rm: int(recv[step].max() - (recv[step] - np.minimum(mine, rm)).max())   # the step's max less
        rows.append(dict(op=g.ops[tg.step_op[step - 1]].outputs[0], name=tg.names[int(tg.req["name"][x["dreq"][r0]])],
                         step=step - 1, ready=ready - 1, steps=sum(ready < y < step for y in recv),
                         recv_max=int(mine.max()), at_max=int((recv[step] == recv[step].max()).sum()),
                         busiest_own=int(mine[busiest]), room_busiest=int(room[busiest]),
                         room_median=int(np.median(room[on])) if on.any() else 0,
                         fits=float(np.minimum(mine, room)[on].sum() / max(1, mine.sum())),
                         fits_busiest=float(min(1.0, room[busiest] / max(1, mine[busiest]))),
                         gain=bound(room), gain_wrap=bound(anywhere),
                         share=float(mine[busiest] / max(1, recv[step][busiest])),
                         fits_wrap=float(np.minimum(mine, anywhere)[on].sum() / max(1, mine.sum()))))
    return rows


def step_table(g, tg) -> list[dict]:
    """Per exchange step of the body: its bytes W (busiest sender or receiver), how many
    tiles receive W, how many have >= 1 KiB of room, the median room."""
    x, T = tg.xfer, tg.tiles
    nb, ch = x["s_row_bytes"] * x["s_rows"], send_charge(tg)
    b0, b1 = tg.body_steps()
    out = []
    for s in range(b0 + 1, b1 + 1):
        if tg.steps[s - 1] != "exchange":
            continue
        sel = x["step"] == s
        r = np.bincount(x["dst"][sel], nb[sel], minlength=T)
        W = max(r.max(initial=0), np.bincount(x["src"][sel], ch[sel], minlength=T).max(initial=0))
        out.append(dict(step=s - 1, op=g.ops[tg.step_op[s - 1]].outputs[0], W=int(W), at_max=int((r == W).sum()),
                        roomy=int((W - r >= 1024).sum()), median=int(np.median(W - r))))
    return out


def main(argv):
    ex_graph.early_gathers = _record(ex_graph.early_gathers)       # whichever runs first
    ex_graph.split_gathers = _record(ex_graph.split_gathers)
    for label, g, e, t in expanded([a for a in argv if a != "-a"]):
        if not e.finalists:
            print("rejected", e.rejection)
            continue
        tg = e.finalists[0].tilegraph
        print(f"{label}: body {e.finalists[0].analysis['body_cycles']}")
        print("| gather | step | ready | steps between | recv max B | tiles at step max | room on busiest B | "
              "room median B | fits (all) | fits (busiest) | share of busiest's bytes | fits (any body step) | "
              "step max could drop B (between) | (any body step) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in room_table(g, tg, SEEN[id(tg)][1]):
            if r["recv_max"] >= 1024 or "-a" in argv:
                print(f"| {r['name']} | x{r['step']} | {r['ready']} | {r['steps']} | {r['recv_max']:,} | {r['at_max']} "
                      f"| {r['room_busiest']:,} | {r['room_median']:,} | {r['fits']:.0%} | {r['fits_busiest']:.0%} "
                      f"| {r['share']:.0%} | {r['fits_wrap']:.0%} | {r['gain']:,} | {r['gain_wrap']:,} |")
        print("\n| step | op | bytes W | tiles receiving W | tiles with >= 1 KiB room | median room B |")
        print("|---|---|---:|---:|---:|---:|")
        for r in step_table(g, tg):
            print(f"| x{r['step']} | {r['op']} | {r['W']:,} | {r['at_max']} | {r['roomy']} | {r['median']:,} |")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Two differently configured searches racing on the machine's cores (`portfolio`),
with an answer that does not depend on which one finished first.

Each worker is a forked copy of the process (the kernels are loaded, the part and
its cheap folds built) running its own deterministic round robin (search.py
`_RoundRobin.loop`). Each one counts its *work*: nodes x variant size, summed
over its attempts (a node costs ~n), a deterministic clock. The answer is the
one found at the least work (ties: the lower worker index), and it is returned
only once every other worker has either ended or passed that much work without
an answer: so the same part gives the same placement whether a worker ran on an
idle core or behind other processes. A worker stops as soon as another has an
answer at less work than its own (it can no longer win).

Only the time limit can cut this short (as it cuts the single-process search):
at the deadline the best answer so far is returned, else none. Workers are
ended by their process handles (never by name); a worker that fails raises
here with its error. Fork only (Linux): elsewhere `available()` is False and
the search runs in one process.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from multiprocessing.connection import wait

GRACE_S = 1.0          # past the deadline, workers get this long to report
LAST: dict = {}        # the last race: winner, work per worker that reported


def available() -> bool:
    return "fork" in mp.get_all_start_methods()


def race(worker, k: int, deadline: float | None):
    """worker(i, hook) -> (addr | None, status, nodes, work) run in k forked
    processes; hook(work) -> False tells worker i to stop (beaten). Returns
    (addr | None, status, nodes summed over the workers): the winner's answer
    (placed or exhausted), else "budget"."""
    ctx = mp.get_context("fork")
    prog = ctx.RawArray("q", [0] * k)      # work done so far, per worker
    won = ctx.RawArray("q", [-1] * k)      # work at its answer, -1 none yet
    procs, conns = [], []
    for i in range(k):
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_run, args=(worker, i, prog, won, w), daemon=True)
        p.start()
        w.close()
        procs.append(p)
        conns.append(r)
    res = {}                               # worker -> (addr, status, nodes, work)
    try:
        while True:
            best = min(((v[3], i) for i, v in res.items() if v[0] is not None
                        or v[1] == "exhausted"), default=None)
            if best is not None and all(
                    j in res or (prog[j], j) > best for j in range(k) if j != best[1]):
                break                      # nothing left can beat it
            if len(res) == k:
                break
            if deadline is not None and time.perf_counter() > deadline + GRACE_S:
                break
            for c in wait([conns[i] for i in range(k) if i not in res], timeout=0.05):
                i = conns.index(c)
                try:
                    msg = c.recv()
                except EOFError:
                    msg = ("error", f"portfolio worker {i} died (exit code "
                                    f"{procs[i].exitcode})")
                if msg[0] == "error":
                    raise RuntimeError(msg[1])
                res[i] = msg
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        for c in conns:
            c.close()
    nodes = sum(v[2] for v in res.values())
    LAST.clear()                           # for portfolio_work.py
    LAST.update(winner=None if best is None else best[1], work={i: v[3] for i, v in res.items()})
    if best is None:
        return None, "budget", nodes
    addr, st, _, _ = res[best[1]]
    return addr, st, nodes


def _run(worker, i, prog, won, conn):
    """In the forked worker: run, report one message, exit without the parent's
    clean-up handlers (they belong to the parent)."""
    def hook(work):
        prog[i] = work
        return not any(won[j] >= 0 and (won[j], j) < (work, i)
                       for j in range(len(won)) if j != i)
    code = 0
    try:
        addr, st, nodes, work = worker(i, hook)
        if addr is not None or st == "exhausted":
            won[i] = work
        prog[i] = max(prog[i], work)
        conn.send((addr, st, nodes, work))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises
        code = 1
        try:
            conn.send(("error", f"portfolio worker {i}: {type(e).__name__}: {e}"))
        except Exception:
            pass
    finally:
        conn.close()
        os._exit(code)

"""experiments/comm/overlap.py: the linear-programming bound on re-timing the weights'
B gathers never exceeds a real placement of their rows (brute force over every whole-row
assignment of small synthetic step sets, code of its own), equals it where fractions
cannot help, and on the tiny ViT lies between "those bytes deleted" and what
early_gathers achieved."""
from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest

from compiler.phases import policy_of, run_phase, target_of
from helpers import target_cfg

_p = Path(__file__).resolve().parents[1] / "experiments" / "comm" / "overlap.py"
_spec = importlib.util.spec_from_file_location("overlap", _p)
ov = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ov)


class Tg:
    """A tile graph's exchange side only: steps, transfers, the body."""

    def __init__(self, tiles, kinds, step, src, dst, nbytes):
        self.tiles, self.steps = tiles, kinds
        n = len(step)
        self.xfer = dict(step=np.asarray(step), src=np.asarray(src), dst=np.asarray(dst),
                         s_row_bytes=np.asarray(nbytes), s_rows=np.ones(n, np.int64))
        self.names, self.req = ["w.b"], dict(name=np.zeros(1, np.int64))   # request 0: a b operand

    def body_steps(self):
        return 0, len(self.steps)


class T:
    exchange_phase_cycles, exchange_bytes_per_cycle = 100, 4

    def exchange_cycles(self, snd, rcv):
        return 100 + -(-max(int(np.max(snd, initial=0)), int(np.max(rcv, initial=0))) // 4)


def brute(tg, movable, window):
    """Least Σ step cost over every whole-row assignment of the movable rows (own code)."""
    x, T_ = tg.xfer, tg.tiles
    E = [s + 1 for s, k in enumerate(tg.steps) if k == "exchange"]
    rows, wins = [], []
    for r0, r1, _, step, ready in movable:
        for r in range(r0, r1):
            rows.append(r)
            wins.append(E if window == "prefetch" and ready <= 0 else [s for s in E if ready < s <= step])
    best = None
    for pick in itertools.product(*wins):
        st = x["step"].copy()
        st[rows] = pick
        tot = 0.0
        for s in E:
            snd, rcv = np.zeros(T_), np.zeros(T_)
            for r in np.flatnonzero(st == s):
                snd[x["src"][r]] += x["s_row_bytes"][r]
                rcv[x["dst"][r]] += x["s_row_bytes"][r]
            tot += 100 + max(snd.max(), rcv.max()) / 4
        best = tot if best is None else min(best, tot)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_bound_below_every_whole_row_placement(seed):
    rng = np.random.default_rng(seed)
    tiles, S = 4, 4
    kinds = ["exchange"] * S
    fixed = 6
    step = np.concatenate([rng.integers(1, S + 1, fixed), np.full(3, S)])
    src, dst = rng.integers(0, tiles, fixed + 3), rng.integers(0, tiles, fixed + 3)
    nb = np.concatenate([rng.integers(1, 5, fixed) * 512, rng.integers(1, 4, 3) * 512])
    tg = Tg(tiles, kinds, step, src, dst, nb)
    movable = [(fixed, fixed + 3, np.zeros(1, np.int64), S, 0)]            # a parameter's B gather built in the last step
    for window in ("same", "prefetch"):
        lp = ov.bound(tg, tg.xfer["step"].copy(), movable, T(), window)
        bf = brute(tg, movable, window)
        assert lp <= bf + 1e-6, (window, lp, bf)
        assert lp >= bf - sum(nb[fixed:]) / 4 - 1e-6        # fractions save at most the rows' own bytes


@pytest.mark.parametrize("tiles,step,src,dst,nb", [
    (2, [1, 2, 2], [0, 1, 0], [1, 0, 1], [4096, 4096, 2048]),     # every other step full on its tiles
    (3, [1, 2, 2], [0, 1, 0], [1, 0, 2], [4096, 2048, 4096]),     # room for the receiver only: the sender binds
    (3, [1, 2, 2], [2, 1, 0], [1, 2, 1], [4096, 2048, 4096])])    # room for the sender only: the receiver binds
def test_bound_exact_for_one_row(tiles, step, src, dst, nb):
    """One movable row (the last) where no split beats the best whole-row placement: the
    bound is exactly the brute force's (a side left out of the program would undercut it)."""
    tg = Tg(tiles, ["exchange"] * 2, step, src, dst, nb)
    movable = [(2, 3, np.zeros(1, np.int64), 2, 0)]
    lp = ov.bound(tg, tg.xfer["step"].copy(), movable, T(), "same")
    assert lp == pytest.approx(brute(tg, movable, "same"))


VIT = dict(name="vit", preset="custom", width=128, hidden=256, heads=2, tokens=16, layers=2)


def test_tiny_vit_between_deleted_and_early_gathers():
    # ring_units off: with unit pieces (the default) the tiny ViT's weights are swapped into the
    # pieces read in place, so no gather into a `.b` operand is left for the bound to re-time
    cfg = dict(model=VIT, target=target_cfg("tiny"), policy=dict(weight_stationary=False, ring_units=False))
    r = {"model": run_phase("model", {}, cfg)}
    r["plan"] = run_phase("plan", r, cfg)
    r["expand"] = run_phase("expand", r, cfg)
    t, policy = target_of(cfg), policy_of(cfg)
    tg, steps0, movable = ov.built(r["model"].graph, r["expand"].finalists[0].candidate, t, policy)
    x = tg.xfer
    nb = x["s_row_bytes"] * x["s_rows"]
    weights = [m for m in movable if ov.weight_gather(tg, m)]
    assert weights, "the tiny ViT should gather some weight from homes"
    same = ov.bound(tg, steps0, movable, t, "same")
    pre = ov.bound(tg, steps0, movable, t, "prefetch")
    early = ov.body_exchange(tg, x["step"], t)
    gone = np.ones(len(nb), bool)
    for r0, r1, *_ in weights:
        gone[r0:r1] = False
    b0, b1 = tg.body_steps()
    deleted = 0.0                                         # those bytes not moved at all: below any re-timing
    for s in range(b0, b1):
        if tg.steps[s] == "exchange":
            sel = gone & (x["step"] == s + 1)
            snd = np.bincount(x["src"][sel], nb[sel], minlength=tg.tiles)
            rcv = np.bincount(x["dst"][sel], nb[sel], minlength=tg.tiles)
            deleted += t.exchange_phase_cycles + max(snd.max(initial=0), rcv.max(initial=0)) / t.exchange_bytes_per_cycle
    assert deleted - 1e-6 <= pre <= same + 1e-6
    assert same <= early + 1e-6

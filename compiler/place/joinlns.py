"""`join_lns`: a partner fold's joins as decisions a local search makes and undoes.

Why (issue #29, sixth round): near zero slack a wrong partner join is invisible
where it is made (a rival pairing within 1 % looks as good), and the learned
no-goods (`partner_nogoods`) only see joins at *stuck* events; the wrong joins at
events that fold on (the quiet chains' residue) are never revisited. Here a fold
is the incumbent of a large-neighbourhood search over its joins:

* a move takes a window of the incumbent's joins (`join_lns_window` consecutive
  joins by event; a pass visits every window once in a seeded order, so every
  region of the time axis is re-chosen in turn; a pass that keeps nothing
  doubles the window, up to 8x) and refolds with them forbidden: the fold
  re-chooses there (rival pairings, or none) and keeps its other joins;
* the child is scored by one probe of the compiled skyline (preorder 0, forward,
  `join_lns_probe` x bands nodes): the share of the part's area (bytes x
  lifetime, of the original requests) on the search's path when the probe hits
  its limit; a placed probe ends the search, an exhausted one proves the child
  has a wrong join (score -1);
* the child replaces the incumbent when it scores higher, or as high with no more
  bands, else it is dropped and the incumbent's forbidden joins are those before
  the move (the undo: nothing of a rejected move is kept). (Plateau moves of any
  size loosened the fold with nothing gained: seen heavy-1000-nz-800, 121 -> 255
  bands in 200 moves, stuck at 0.62 of the area.)

Deterministic: the windows, the probe limits and the scores are functions of
the fold and the step count (node counts, not the clock). A placement found
here is expanded to the part's requests and checked by the independent
validator before it is returned (a rejection raises: a wrong join would be a
bug in the fold, never an answer).
"""
from __future__ import annotations

import numpy as np

from .coalesce import Coalesced
from .repair import part_problem
from .validate import validate


def path_area(co, sub, partial) -> float:
    """Share of the part's area (bytes x lifetime of its requests) whose band is
    on the search path `partial` (>= 0: placed)."""
    ext = np.asarray(sub.ext, np.float64)
    life = np.asarray(sub.end, np.float64) - np.asarray(sub.start, np.float64)
    area = ext * life
    placed = np.asarray(partial)[co.gid] >= 0
    return float(area[placed].sum() / max(1.0, area.sum()))


class JoinLNS:
    """The search over one root partner fold's joins (see the module docstring)."""

    def __init__(self, root: Coalesced, chain: int, window: int, probe: int):
        self.sub, self.root, self.inc = root.sub, root, root
        self.chain, self.window, self.probe = chain, window, probe
        self.score = None             # the incumbent's probe score (None: not probed yet)
        self.step = self.passes = 0
        self.plan, self.size, self.kept_in_pass = [], window, False
        self.log = []                 # (step, first event, last event, bands, score, kept)

    def _next_window(self):
        """The next window of the current pass. A pass cuts the incumbent's joins (by
        event) into windows of `size` consecutive joins, its boundaries shifted by
        half a window every other pass, and visits them in a seeded order (chain,
        pass). A pass that keeps nothing doubles the size (at most 8x `window`: a
        local optimum for small windows is left by re-choosing larger regions); a
        kept move starts a new pass at `window` on the new incumbent."""
        if not self.plan:
            joins = sorted(self.inc.joins,
                           key=lambda jt: (jt[1], sorted(jt[0][0]), sorted(jt[0][1])))
            if not joins:
                return None
            if self.passes and not self.kept_in_pass:
                self.size = min(2 * self.size, 8 * self.window)
            off = (self.passes % 2) * (self.size // 2)
            cuts = [0] + list(range(off or self.size, len(joins), self.size)) + [len(joins)]
            ws = [joins[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
            rng = np.random.default_rng([self.chain, self.passes])
            self.plan = [ws[k] for k in rng.permutation(len(ws))]
            self.passes += 1
            self.kept_in_pass = False
        return self.plan.pop()

    def _probe(self, co, CS, cfg):
        """(1 placed | 0 exhausted | -1 limit, score, its search); its nodes counted."""
        x = CS(co, cfg)
        r = x.run(self.probe * co.n, x.preorders(0), cfg.canonical_skyline)
        self.nodes += x.nodes
        self.work += x.nodes * co.n
        if r == 1:
            return 1, 1.0, x
        if r == 0:
            return 0, -1.0, x
        return -1, path_area(co, self.sub, x.partial), x

    def move(self, CS, cfg):
        """One move: (addr of the part | None, the new incumbent's search or None
        when the move was undone, work in nodes x size, folds made, nodes)."""
        self.work = self.nodes = 0
        out = self._move(CS, cfg)
        return out + (self.work, self.folds, self.nodes)

    def _move(self, CS, cfg):
        self.folds = 0
        if self.score is None:
            r, self.score, x = self._probe(self.inc, CS, cfg)
            if r == 1:
                return self._placed(self.inc, x), None
        win = self._next_window()
        if win is None:
            return None, None
        self.step += 1
        child = Coalesced(self.sub, 0.0, False, self.inc.schedule, self.inc.quiet,
                          self.inc.forbid | {k for k, _ in win})
        self.folds += 1
        r, score, x = self._probe(child, CS, cfg)
        kept = r == 1 or score > self.score or (score == self.score and child.n <= self.inc.n)
        self.log.append((self.step, win[0][1], win[-1][1], child.n, score, kept))
        if r == 1:
            return self._placed(child, x), None
        if not kept:
            return None, None                   # undo: the incumbent is unchanged
        child.depth = self.inc.depth
        self.inc, self.score = child, score
        self.plan, self.size, self.kept_in_pass = [], self.window, True
        return None, x

    def _placed(self, co, x):
        addr = co.expand(x.addr)
        if validate(part_problem(self.sub), addr):
            raise RuntimeError("join_lns: a fold's placement the validator rejects (a bug)")
        return addr

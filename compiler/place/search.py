"""After every greedy order failed: split the tile into independent parts
(`decompose`), and per part try the greedy orders again, the address-domain
search (`search`), then the canonical search (`canonical`). The canonical
search is complete, so its exhaustion is a proof (INFEASIBLE); budget
exhaustion anywhere is UNKNOWN."""
from __future__ import annotations

import importlib.util
import time

from dataclasses import dataclass, field

from . import bound, greedy, portfolio
from .addrsearch import AddressSearch
from .canonical import CanonicalSearch
from .coalesce import PARTNER_SCHEDULES, PORTFOLIO_SCHEDULES, TOLERANCES, Coalesced
from .instance import SubInstance, parts, time_mirror
from .joinlns import JoinLNS


@dataclass
class SearchResult:
    addr: list | None = None
    method: str = ""
    nodes: int = 0
    proof: object = None
    detail: dict = field(default_factory=dict)


def run(inst, cfg, t0, hint=None) -> SearchResult:
    deadline = None if cfg.time_limit_s is None else t0 + cfg.time_limit_s
    groups = parts(inst) if cfg.decompose else [list(range(inst.n))]
    addr = [-1] * inst.n
    res = SearchResult(detail={"parts": len(groups)})
    methods = set()
    for g in groups:
        sub = SubInstance(inst, g)
        a, how, nodes, exhausted = _solve_part(sub, cfg, deadline)
        res.nodes += nodes
        if a is None:
            res.method = how
            res.detail["failed_part"] = len(g)
            if exhausted:
                ev, live, avail = bound.peak(inst)
                res.proof = bound.Proof("search-exhausted", ev, live, avail, -1)
            return res
        methods.add(how)
        for t, j in enumerate(g):
            addr[j] = a[t]
    res.addr = addr
    res.method = "+".join(sorted(methods))
    return res


def _slack(sub) -> float:
    """1 - peak live bytes / free bytes of the part."""
    ev = sorted(set(sub.start))
    peak = max((sum(x for s, e, x in zip(sub.start, sub.end, sub.ext) if s <= t < e) for t in ev),
               default=0)
    free = sum(b - a for r in (0, 1) for a, b in sub.windows[r])
    return 1 - peak / free if free else 0.0


def _solve_part(sub, cfg, deadline):
    """(addr or None, method, nodes, proved_infeasible)."""
    for name, order in greedy.orders(sub, cfg):
        a, failed = greedy.place_order(sub, order)
        if failed < 0:
            return a, name, 0, False
    nodes = 0
    if cfg.canonical and cfg.compiled_skyline and pure_part(sub):
        a, st, nodes = _compiled(sub, cfg, deadline)
        if a is not None:
            return a, "compiled-skyline", nodes, False
        if st == "exhausted":
            return None, "compiled-skyline-exhausted", nodes, True
        if deadline is not None and time.perf_counter() >= deadline:
            return None, "unknown", nodes, False
    if cfg.search:
        s = AddressSearch(sub, cfg, deadline)
        a, st = s.run()
        nodes += s.nodes
        if a is not None:
            return a, "search", nodes, False
    if cfg.canonical:
        # Two complete searches, the skyline first with half the budget (strong
        # near zero slack, where its "leave this floor empty" branch dies at
        # once), then the monotone-offset MiniMalloc order (strong with slack and
        # at proving infeasibility). Either one's exhaustion is a proof.
        budget = cfg.canonical_node_budget if cfg.canonical_node_budget > 0 else 1 << 62
        modes = [(False, budget)]
        if cfg.canonical_skyline:
            modes = [(True, budget // 2), (False, budget - budget // 2)]
            if _slack(sub) > 0.02:   # with slack, the monotone order goes first
                modes.reverse()
        for k, (sky, b) in enumerate(modes):
            dl = deadline
            if deadline is not None and k + 1 < len(modes):
                now = time.perf_counter()
                dl = now + max(0.0, deadline - now) / 2
            c = CanonicalSearch(sub, cfg, dl, skyline=sky, budget=b)
            a, st = c.run()
            nodes += c.nodes
            if a is not None:
                return a, "canonical-skyline" if sky else "canonical", nodes, False
            if st == "exhausted":
                return None, "canonical-exhausted", nodes, True
    return None, "unknown", nodes, False


def pure_part(sub) -> bool:
    """One free window for every request and no bank edges (the compiled
    kernels' class). Not imported here: loading the kernels costs ~0.5 s (numba's
    cache; a first compilation ~15 s), paid in _compiled outside the time limit,
    and tiles that never need them skip it."""
    return kernel_class(sub) and importlib.util.find_spec("numba") is not None


def kernel_class(sub) -> bool:
    """One free window for every request and no bank edges."""
    wins = [w for r in (0, 1) for w in sub.windows[r]]
    return len(wins) == 1 and not any(sub.bank) and all(len(d) == 2 for d in sub.dom0)


def _compiled(sub, cfg, deadline):
    """Spend the part's budget (nodes: canonical_node_budget, 0 = none; and/or
    the wall clock) on the compiled skyline as restarts: round r gives each
    tie-break order 2n * 2^r nodes (MiniMalloc's round robin of preorders),
    plus one seeded shuffle per round, each in both orders: the skyline (strong
    at zero slack) and MiniMalloc's monotone offsets (strong with some slack;
    alone when `canonical_skyline` is off). An attempt that ends under its limit
    explored everything: a proof. With `coalesce_handovers`, each attempt is
    made first on the part with its handovers joined (coalesce.py), a
    restriction whose exhaustion proves nothing; with `coalesce_partners`, when
    one short attempt on each such fold places nothing, the partner folds
    (and with `partner_quiet_events` their quiet twins) go first; with
    `partner_nogoods`, after each round every partner fold not yet refolded
    adds its refold (coalesce.py: the joins at stuck events forbidden) right
    after it: chains one generation longer per round (with `eager_refolds`, a
    fold is refolded after `refold_after` failed attempts). With `equal_turns`
    every attempt of a round gets the smallest variant's limit. With
    `portfolio` (and a time limit), the round robin after the short attempts
    runs as two forked workers (portfolio.py): one on the part, its handover
    folds and the partner folds of PORTFOLIO_SCHEDULES, one on the default
    partner folds (PARTNER_SCHEDULES) only. With `time_mirror`, every other
    attempt of a variant searches it with time reversed (instance.py time_mirror).
    (addr | None, placed|exhausted|budget, nodes)"""
    t = time.perf_counter()
    from .skyline_jit import CompiledSkyline, warm
    warm()
    jit = time.perf_counter() - t     # one-off loading/compilation: not part of the time limit
    if deadline is not None:
        deadline += jit
    rr = _RoundRobin(sub, cfg, deadline, CompiledSkyline)
    partners = []
    if cfg.coalesce_handovers:
        stacks = (True, False) if cfg.coalesce_stacks else (False,)
        rr.join([(tol, stack, None, False) for stack in stacks for tol in TOLERANCES], 0)
        if cfg.coalesce_partners:
            # partner folding costs 0.1-1.5 s of Python on a 1000-request part:
            # first one short attempt on each cheap fold, which places most
            # foldable parts (zs-450: 0.06 s instead of 0.30 s; trace-900-z 0.07 s, not 1.5 s)
            for x, co in list(rr.tries[:-1]):
                r = x.run(2 * x.n, x.preorders(0), cfg.canonical_skyline)
                if r == 1:
                    return co.expand(x.addr), "placed", rr.nodes()
                if r == 0:
                    rr.tries.remove((x, co))
            partners = _partners(PARTNER_SCHEDULES, cfg)
    if cfg.portfolio and deadline is not None and partners and portfolio.available():
        base = rr.nodes()          # the short attempts' nodes, counted once (worker 0)

        def worker(k, hook):
            # the second worker: the default partner folds and their chains alone
            # (they place most cases; at 2-3x the attempts when the 700-1000-request
            # unfolded part and handover folds, whose nodes cost ~n, are not beside
            # them); the first: the part, its handover folds and other partner folds
            # (PORTFOLIO_SCHEDULES)
            if k > 0:
                rr.tries[:] = []
                rr.may_repair = False
            rr.join(partners if k else _partners(PORTFOLIO_SCHEDULES, cfg), 0)
            a, st = rr.loop(hook)
            return a, st, rr.nodes() - (base if k else 0), rr.work
        return portfolio.race(worker, 2, deadline)
    rr.join(partners, 0)
    a, st = rr.loop()
    return a, st, rr.nodes()


def _partners(schedules, cfg):
    out = [(0.0, False, sch, False) for sch in schedules]
    if cfg.partner_quiet_events:
        out += [(0.0, False, sch, True) for sch in schedules]
    return out


# `portfolio`: a fold's Python counted as this many nodes x size per request of the
# part, so that work tracks time and the winner seldom waits for the other worker
# (heavy-800-nz-57721587, load ~2: 0.15 s per fold of its 722-request part, while
# the kernels did 15-21 M nodes x size per second: ~4,000 per request). Before it
# was counted, the first worker reached the second's winning work 2x later.
FOLD_WORK = 4000


class _RoundRobin:
    """The variants of one pure part (the part itself, its folds and chains) and
    the round robin over them (see _compiled)."""

    def __init__(self, sub, cfg, deadline, CompiledSkyline):
        self.sub, self.cfg, self.deadline, self.CS = sub, cfg, deadline, CompiledSkyline
        cs = CompiledSkyline(sub, cfg)
        self.tries = [(cs, None)]     # (search, Coalesced or None): joined problems first
        self.seen, self.every = [], [cs]   # every search made (its nodes count)
        self.work = 0                 # nodes x size, plus FOLD_WORK per request folded
        self.back = {}                # `time_mirror`: per variant, its time-reversed search
        self.lns = {}                 # `join_lns`: per root partner fold and incumbent, its search
        self.lns_nodes = 0            # ...nodes of its probes (rejected children's too)

    def nodes(self):
        return sum(x.nodes for x in self.every) + self.lns_nodes

    def _add(self, co, at):
        self.seen.append(co.key())
        self.tries.insert(at, (self.CS(co, self.cfg), co))
        self.every.append(self.tries[at][0])

    def join(self, variants, at):
        for tol, stack, sch, quiet in variants:
            co = Coalesced(self.sub, tol, stack, sch, quiet)
            self.work += FOLD_WORK * self.sub.n
            if co.n < self.sub.n and co.key() not in self.seen:
                self._add(co, at)
                at += 1

    def mirror_of(self, x, co):
        """`time_mirror`: the search of variant (x, co) with time reversed, made once:
        the same bands (the restriction is unchanged), but the skyline fills the
        leftmost lowest floor first, so the reversed search explores another tree (heldout
        heavy-1000-nz-26457536: placed at 410 M work with it, unknown after 1220 + 1435 M,
        the two workers' 60 s, without)."""
        m = self.back.get(id(x))
        if m is None:
            m = self.back[id(x)] = self.CS(time_mirror(co if co is not None else self.sub),
                                           self.cfg)
            self.every.append(m)
        return m

    may_repair = True                 # `lns_repair`: portfolio's worker 0 only
    repaired = False

    def repair_due(self):
        c = self.cfg
        return c.lns_repair and self.may_repair and not self.repaired \
            and self.work >= c.repair_after_work

    def repair(self):
        """`lns_repair`: repair.py's large-neighbourhood repair of the best greedy
        partial placement (the part's or a fold's), once; its work counted."""
        from .repair import best_start, repair
        self.repaired = True
        folds = [co for _, co in self.tries if co is not None]
        a, w = repair(self.sub, self.cfg, best_start(self.sub, folds), deadline=self.deadline)
        self.work += w
        return a

    def refold(self, co, at):
        """`partner_nogoods`: insert at `at` the partner fold `co` redone without the
        joins it made at stuck events (learned no-goods), once per fold."""
        cfg = self.cfg
        if not cfg.partner_nogoods or co is None or co.schedule is None or co.refolded \
                or co.depth >= cfg.partner_nogood_depth:
            return
        co.refolded = True
        ch = co.refold()
        self.work += FOLD_WORK * self.sub.n if ch is not None else 0
        if ch is not None and ch.key() not in self.seen:
            self._add(ch, at)

    def lns_move(self, co):
        """`join_lns` (joinlns.py): after a failed attempt on a root partner fold or
        on its search's incumbent, one move of the search over that fold's joins;
        an accepted child takes the incumbent's turn in the round robin (inserted
        after the root the first time, replacing the incumbent after that). Returns
        the part's placement when a probe places it, else None."""
        cfg, tries = self.cfg, self.tries
        L = self.lns.get(id(co))
        if L is None:
            if co is None or co.schedule is None or co.depth > 0:
                return None               # refolds have their own chain (partner_nogoods)
            chain = len({id(v) for v in self.lns.values()})    # seeds its window order
            L = self.lns[id(co)] = JoinLNS(co, chain, cfg.join_lns_window, cfg.join_lns_probe)
        old = L.inc
        addr, x, work, folds, nodes = L.move(self.CS, cfg)
        self.work += work + FOLD_WORK * self.sub.n * folds
        self.lns_nodes += nodes
        if x is not None:
            L.inc.refolded = True         # no no-good chain grows from an incumbent
            slot = [k for k, (_, c) in enumerate(tries) if c is old]
            if old is L.root:
                tries.insert(slot[0] + 1 if slot else len(tries), (x, L.inc))
            elif slot:
                tries[slot[0]] = (x, L.inc)
            else:
                tries.append((x, L.inc))
            self.lns[id(L.inc)] = L
        return addr

    def loop(self, hook=None):
        """The round robin until placed, exhausted or out of budget: (addr | None,
        status). `hook(work)`, after each failed attempt (portfolio.py), returns
        False to stop ("beaten"); work (self.work) = the sum of nodes x variant
        size plus FOLD_WORK per request per fold made: a deterministic measure of
        the time spent (a node costs ~n)."""
        cfg, tries, deadline = self.cfg, self.tries, self.deadline
        budget = cfg.canonical_node_budget if cfg.canonical_node_budget > 0 else 1 << 62
        rate = None                   # nodes per second, measured
        fails = {}                    # eager_refolds: failed attempts per fold
        rnd = 0
        while tries:
            seeds = [0, 1, 2, 3, 4 + rnd] if cfg.canonical_restarts else [0]
            modes = [True, False] if cfg.canonical_skyline else [False]
            for seed, sky, (x, co) in ((s, m, v) for s in seeds for m in modes for v in list(tries)):
                if cfg.join_lns and (x, co) not in tries:   # a move replaced it this round
                    continue                    # (off: the loop as before, byte for byte)
                size = min(y.n for y, _ in tries) if cfg.equal_turns else x.n
                limit = (size * 2 << rnd) if cfg.canonical_restarts else budget
                limit = min(limit, budget - self.nodes())
                if deadline is not None:
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        return None, "budget"
                    if rate is not None:
                        limit = min(limit, max(1000, int(left * rate)))
                    elif not cfg.canonical_restarts:
                        limit = min(limit, 20_000)     # a first, short probe measures the rate
                if limit <= 0:
                    return None, "budget"
                # time_mirror: every other attempt (by seed and round) reversed; the
                # mirror is the same problem, so its exhaustion proves the same
                y = self.mirror_of(x, co) if cfg.time_mirror and (seed + rnd) % 2 else x
                t = time.perf_counter()
                n0 = y.nodes
                r = y.run(limit, y.preorders(seed), sky)
                dt = time.perf_counter() - t
                if y.nodes - n0 >= 1000 and dt > 0:
                    rate = (y.nodes - n0) / dt
                self.work += (y.nodes - n0) * y.n
                if r == 1:
                    return (co.expand(y.addr) if co else y.addr), "placed"
                if hook is not None and not hook(self.work):
                    return None, "beaten"
                if cfg.join_lns and co is not None:     # joinlns.py: one move per failure
                    a = self.lns_move(co)
                    if a is not None:
                        return a, "placed"
                    if (x, co) not in tries:            # an incumbent the move replaced
                        continue
                if self.repair_due():          # lns_repair (repair.py): once, by work
                    a = self.repair()
                    if a is not None:
                        return a, "placed"
                    if hook is not None and not hook(self.work):
                        return None, "beaten"
                if r < 0 and cfg.eager_refolds and co is not None:  # a later pass sees the
                    fails[id(co)] = fails.get(id(co), 0) + 1        # refold: a chain grows per
                    if fails[id(co)] >= cfg.refold_after:          # refold_after attempts
                        self.refold(co, tries.index((x, co)) + 1)
                if r == 0:
                    if co is None:
                        return None, "exhausted"
                    at = tries.index((x, co))  # the joined problem has none: no proof
                    tries.remove((x, co))
                    self.refold(co, at)        # ...so a wrong join: its refold takes its place
                    if not tries:
                        return None, "budget"
            for x, co in list(tries):          # a round failed: each partner fold refolded,
                self.refold(co, tries.index((x, co)) + 1)   # the refold right after it (one
            rnd += 1                                        # generation per round)
        return None, "budget"

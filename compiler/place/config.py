"""PlaceConfig: every placement heuristic is a named flag, on by default, so an
ablation is one override (docs/architecture.md §7). Budgets are named keys too; the default
run is deterministic (no wall-clock limit unless `time_limit_s` is set)."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace


DUMP_MODES = ("none", "failing", "all")


@dataclass(frozen=True)
class PlaceConfig:
    # proofs
    lower_bound: bool = True            # live-byte bound (overall, per region class, per request)
    # greedy: online first-fit, then offline orders (each one attempt)
    greedy_online: bool = True          # allocation-event order (start time), first fit
    order_lifetime: bool = True         # longest lifetime first
    order_alignment: bool = True        # largest alignment first
    order_end_first: bool = True        # allocations surviving to completion first, by size
    # exact searches (run only when every greedy order failed)
    pin_whole_lifetime: bool = True     # first fix the requests live at every event (homes), largest
                                        #   first at the lowest address, and search the rest, which
                                        #   then splits into parts (pinned.py); else the whole tile
    pin_time_share: float = 0.1         # ...with time_limit_s, the pinned attempt's share of it (assumed:
                                        #   pinned tiles place in < 1 s or not at all, 27-layer batch 6)
    decompose: bool = True              # split at times no request crosses (independent parts)
    search: bool = True                 # address-domain search with propagation
    must_occupy_propagation: bool = True  # propagate bytes/elements every legal address covers
    search_restarts: bool = True        # spend the node budget as restarts with varied orders
    canonical: bool = True              # MiniMalloc-style canonical (monotone-offset) search
    canonical_skyline: bool = True      # ...branch on what fills the lowest, leftmost floor
    canonical_restarts: bool = True     # ...spend its budget as restarts with varied tie-breaks
    dominance: bool = True              # ...skip placements that leave a gap a waiting request fills
    section_inference: bool = True      # ...prune when a time section's remaining bytes cannot fit
    valley_inference: bool = True       # ...or a skyline valley's bytes that leave it cannot clear
                                        #    its lower wall (compiled kernels)
    compiled_skyline: bool = True       # pure parts (one window, no bank edges): numba skyline first
    coalesce_handovers: bool = True     # ...each attempt first with same-size handovers joined
    coalesce_stacks: bool = True        # ...before those, also same-lifetime requests stacked
                                        #    into one band, alternating with handovers to a
                                        #    fixpoint (a guillotine cut's tree folds back up)
    coalesce_partners: bool = True      # ...before those, partner folding: a stack forms only
                                        #    with the handover partner its extent sum matches
                                        #    (subsets per event, packed as an assignment;
                                        #    folded live bytes checked against capacity)
    partner_quiet_events: bool = True   # ...plus, per schedule, a variant joining nothing at
                                        #    busy events (> 10 bands a side: subset sums
                                        #    coincide there)
    partner_nogoods: bool = True        # ...learned no-goods: after each round of the round
                                        #    robin (at once when its search exhausts), a partner
                                        #    fold is redone with every join it made at a stuck
                                        #    event (bands still ending and starting there,
                                        #    unjoined) forbidden; the refold joins the round
                                        #    robin (a chain, partner_nogood_depth refolds deep)
    partner_nogood_depth: int = 12      # ...refolds per partner fold at most
    eager_refolds: bool = True          # ...a partner fold is refolded after refold_after
                                        #    failed attempts, not after the round (ten attempts):
                                        #    chains grow ~3x faster (rounds double in nodes: a
                                        #    1000-request case reached depth 5 in 60 s, the
                                        #    chain that places it needed 9)
    refold_after: int = 3               # ...failed attempts per generation (1 flooded the round
                                        #    robin: hard heavy-800-nz 4.9 -> 22 s, 16 s of it
                                        #    folding, placed by an unrefolded fold's 11th attempt)
    equal_turns: bool = True            # ...the round robin gives every variant the node limit
                                        #    of the smallest (2 n << round), not one growing
                                        #    with its own size: the unfolded part and coarse
                                        #    folds took 70-80 % of the time while a partner fold
                                        #    of 150 bands was the one to place
    portfolio: bool = True              # ...with a time limit, after the short attempts the
                                        #    round robin runs as two forked workers racing on
                                        #    the 2 cores (portfolio.py): one on the default partner
                                        #    folds and chains alone, one on the rest (the part, its
                                        #    handover folds) and other partner folds
                                        #    (PORTFOLIO_SCHEDULES); the answer at the least work (nodes x size)
                                        #    wins, returned once the other passed that work:
                                        #    the same placement whatever the timing
    time_mirror: bool = True            # ...every other attempt of each variant (by seed and
                                        #    round) searches it with time reversed: the same
                                        #    problem (a placement of the mirror is one of the
                                        #    part), but the skyline fills from the other end,
                                        #    another tree (no extra variant, no extra turns)
    lns_repair: bool = False            # ...once the round robin's work passes repair_after_work,
                                        #    a large-neighbourhood repair (repair.py): the best
                                        #    greedy partial placement (part or fold), windows (a
                                        #    lifetime's neighbours, widened on failure) re-solved
                                        #    by CP-SAT with the rest fixed, one worker,
                                        #    deterministic time only. Off: on the tuning set's
                                        #    misses the start holds 88-95 % of the area and 40
                                        #    windows gain 0.01-0.8 % (README, sixth round)
    join_lns: bool = False              # ...a large-neighbourhood search over each default
                                        #    partner fold's joins (joinlns.py): after a failed
                                        #    attempt on the fold or its incumbent, a window of
                                        #    join_lns_window joins is refolded with them
                                        #    forbidden; the child replaces the incumbent if a
                                        #    probe's path holds at least as much of the area,
                                        #    else it is undone
    join_lns_window: int = 8            # ...consecutive joins (by event) re-chosen per move
    join_lns_probe: int = 64            # ...probe nodes per band (preorder 0, forward)
    repair_after_work: int = 300_000_000  # ...the round robin's work (nodes x size) first
    repair_work: int = 2_200_000_000    # ...its work budget (repair.py REPAIR_WORK, WINDOW_WORK:
                                        #    40 windows of 0.1 deterministic units)
    repair_window_max: int = 60         # ...requests freed per window at most
    repair_step_det_s: float = 0.1      # ...CP-SAT deterministic time per window
    hatless_pruning: bool = True        # ...a branch placing a request with nothing live beside it
                                        #    is the only one its node needs (MiniMalloc's name)
    cpsat_fallback: bool = True         # tiles outside the kernels' class (bank edges, several
                                        #   windows), still unknown after the searches: CP-SAT
                                        #   (OR-Tools) on the whole tile, one worker, with the
                                        #   time left (the searches then get cpsat_search_share
                                        #   of the time limit) or, without a time limit (node
                                        #   budgets), cpsat_deterministic_s
    cpsat_search_share: float = 0.1     # ...6 s of 60: 30x the slowest such tile the searches
                                        #   place in the corpus (main max 67 ms, tight 0.2 s)
    cpsat_max_requests: int = 400       # ...only tiles this small (its model grows with pairs)
    cpsat_deterministic_s: float = 5.0  # ...CP-SAT's deterministic-time budget (reproducible)
    search_node_budget: int = 4096      # per search method and part
    search_filter_budget: int = 2_000_000  # domain subtractions per address-domain search
    canonical_node_budget: int = 20_000  # nodes per part for the canonical search (0: no limit)
    time_limit_s: float | None = None   # optional wall-clock cap on the searches (benchmarks)
    stop_at_failure: bool = True        # place phase: a chunk of distinct tile problems (phase.py
                                        #   CHUNK, in tile order) stops at its first failed tile: the
                                        #   finalist is rejected whatever its other tiles do, so at
                                        #   most one failed tile's budgets per chunk are spent. The
                                        #   tiny 8-layer batch-4 ring_units finalist had 6 tiles
                                        #   failing and 3 more going to CP-SAT, one chunk of 63:
                                        #   > 7 CPU-min before the unit bound (#26). The rejection
                                        #   names the worst of the failed tiles solved
    dump: str = "failing"               # place phase: tile problems to hand back as dumps
                                        #   (none | failing | all; distinct problems only)

    def __post_init__(self):
        if self.dump not in DUMP_MODES:
            raise ValueError(f"place config key 'dump': expected one of {', '.join(DUMP_MODES)}, "
                             f"got {self.dump!r}")

    def solver_key(self) -> "PlaceConfig":
        """The config without keys that do not change a solution (cache keys)."""
        return replace(self, dump="failing")

    @classmethod
    def from_dict(cls, d: dict | None) -> "PlaceConfig":
        """Build from a mapping (e.g. the Hydra `place` group). Strings are
        coerced (CLI `--set key=value`); an unknown key is a ValueError naming it."""
        known = {f.name: f for f in fields(cls)}
        kw = {}
        for k, v in (d or {}).items():
            if k not in known:
                raise ValueError(f"unknown place config key {k!r} "
                                 f"(known: {', '.join(sorted(known))})")
            kw[k] = _coerce(k, known[k].default, v)
        return cls(**kw)

    def override(self, **kw) -> "PlaceConfig":
        """A copy with some keys changed (same checks and coercion as from_dict)."""
        known = {f.name for f in fields(self)}
        bad = sorted(set(kw) - known)
        if bad:
            raise ValueError(f"unknown place config key {bad[0]!r}")
        return replace(self, **{k: _coerce(k, getattr(self, k), v) for k, v in kw.items()})

def _coerce(key: str, default, v):
    if isinstance(default, bool):
        if isinstance(v, str):
            if v.lower() in ("1", "true", "yes", "on"):
                return True
            if v.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"place config key {key!r}: expected a boolean, got {v!r}")
        return bool(v)
    if isinstance(default, float):
        try:
            return float(v)
        except (TypeError, ValueError):
            raise ValueError(f"place config key {key!r}: expected a number, got {v!r}") from None
    if key == "time_limit_s":
        if v is None or (isinstance(v, str) and v.lower() in ("none", "null", "")):
            return None
        return float(v)
    if isinstance(default, int):
        try:
            return int(v)
        except (TypeError, ValueError):
            raise ValueError(f"place config key {key!r}: expected an integer, got {v!r}") from None
    return v

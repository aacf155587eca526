"""Beam search over the matmul grids of a graph, costing each choice with its neighbours.

The ops are walked in graph order (a Repeat body is the op list: searched once). A
state is the grid chosen so far for every matmul, the layout every tensor then has,
and the estimated cycles; after each matmul only the `width` cheapest states survive
(at the last matmul the `keep` cheapest, the candidates handed to expand). Pruning
comes right after the matmul, before the ops that follow it are costed: a grid whose
payoff comes later (a softmax spared its conversion by whole-row blocks) survives only
on its cost so far, so a wider beam can find it (the tiny ViT of tests/test_plan_beam.py
needs 128).

What a state's layouts change is the *sender* side of every exchange. A matmul's tiles
receive their operand blocks whatever the producer (`recv` of plan/matmul.py), but
the producer's tiles must send each of their bytes to every consumer tile that needs
it: an A block to the consumer's gn tiles of its row, a B block to its gm tiles. An
exchange superstep lasts as long as the busier side: the fullest receiver or the
fullest sender, each at exchange_bytes_per_cycle (docs/architecture.md §2: per tile, no pair bonus).

Layouts, as expand builds them (compiler/expand/graph.py):
- inputs and parameters: their homes (plan/homes.py: whole rows, or whole micro-panel
  spans for weights the AMP reads as panels), taken unrotated (expand rotates them to
  balance memory: the per-tile sends here are an estimate, the same for every candidate's
  choice at that op); a b operand the AMP reads as panels gathered from a row-major
  layout would be a byte-wise permutation: not a choice;
- a matmul output: its C blocks, the gm × gn grid over [m, n] of every group
  (k-split: tile l of a block holds rows [l·rr, (l+1)·rr) after the reduction), on
  the tiles from its rotation (Grid.rot: resident grids are laid around the tiles);
- bias, gelu, cast: the input's layout, each block one kernel on its tile;
- layernorm, softmax: the input's layout if its blocks are whole rows, else the
  tensor is first converted to whole rows over all tiles (one exchange superstep);
  with policy.ln_halves a LayerNorm may instead take row halves on two tiles
  (plan/lnhalves.py), where that prices lower, gamma and beta's bytes counted for both;
- add: the first operand's layout; the second is converted to it unless alike;
- any other op (flash_attention): not costed here, output taken as whole rows.
Costs that no choice changes (LayerNorm parameter gathers, the carried-value fill,
host streams) are left out: they shift every state alike.

Everything over a matmul's grids is a numpy vector; per-state work is cached by the
layouts it depends on, so the search costs a few array operations per state and op.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from ..target import DTYPE_BYTES, Target
from .homes import home_blocks, panel_elems
from .layouts import groups_of, rotated, full_rows, operand_windows, tile_elems, word_aligned, pareto, per_tile_cost
from .matmul import OUT_BYTES, reduce_rows
from .relay import relay_blocks
from .budgets import pruned
from .rowcalls import chunked_cycles, row_quantum
from .ring import ring_exchange
from .lnhalves import HALVES, fits as halves_fit, halves_blocks, halves_cycles
from .options import Options, Residency

ROWS = ("rows",)          # layout descriptor: whole rows over all tiles
PANELS = ("panels",)      # a weight's micro-panel home (plan/homes.py)


# layouts as blocks (r0, nr, c0, nc, tile): plan/layouts.py ---------------------------
def out_blocks(op, o: Options, i: int):
    """Blocks of matmul `op`'s output under grid i: per group g (chunk q = g // gb),
    serial pass p and tile (q, bi, j, l), rows cr + p·Mp + bi·mb (+ l·rr when k-split),
    columns cc + j·nb (Mp = rows per pass; every pass on the same tiles)."""
    gr = groups_of(op)
    M, N = op.attr("m"), op.attr("n")
    gm, gn, gk, gb, mb, nb, sp = (int(o.a[f][i]) for f in ("gm", "gn", "gk", "gb", "mb", "nb", "sp"))
    Mp = -(-M // sp)
    g, p, bi, j, l = (x.ravel() for x in np.meshgrid(np.arange(len(gr)), np.arange(sp), np.arange(gm),
                                                     np.arange(gn), np.arange(gk), indexing="ij"))
    tile = (((g // gb) * gm + bi) * gn + j) * gk + l
    mi = np.minimum(mb, np.minimum(Mp, M - p * Mp) - bi * mb)
    nc = np.minimum(nb, N - j * nb)
    r0 = gr[g, 4] + p * Mp + bi * mb
    if gk > 1:
        rr = reduce_rows(mb, gk, nb, N)
        r0, mi = r0 + l * rr, np.clip(mi - l * rr, 0, rr)
    keep = mi > 0
    return r0[keep], mi[keep], (gr[g, 5] + j * nb)[keep], nc[keep], tile[keep]


# the search -----------------------------------------------------------------------
class Pricing(NamedTuple):
    """The policy flags that change what the beam charges (plan passes the trial's policy's)."""
    bcast: bool = False        # policy.broadcast_sends: a block sent to several tiles costs its sender once
    row_calls: bool = False    # policy.row_calls: a LayerNorm / softmax block costs its cheapest row chunks
    ln_halves: bool = False    # policy.ln_halves: a LayerNorm may take row halves on two tiles (plan/lnhalves.py)


class Costs:
    """Cost terms of a graph on a target, cached by the layouts they depend on."""

    def __init__(self, graph, target: Target, options: dict[int, Options], panels: dict, pricing: Pricing = Pricing()):
        self.g, self.t, self.opt, self.panels = graph, target, options, panels
        self.bcast = pricing.bcast
        self.row_calls = pricing.row_calls
        self.ln_halves = pricing.ln_halves
        self.cache = {}

    def _memo(self, key, fn):
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]

    def blocks(self, name: str, desc):
        def make():
            if desc == HALVES:
                return halves_blocks(*self.g.tensors[name].shape, self.t.tiles)
            if desc in (ROWS, PANELS):      # whole rows (homes or converted), or a panel home
                P = self.panels[name] if desc == PANELS else 0
                return home_blocks(*self.g.tensors[name].shape, 1, self.t.tiles, P)[0]
            _, n, i, rot = desc
            return rotated(out_blocks(self.g.ops[n], self.opt[n], i), rot, self.t.tiles)
        return self._memo(("blocks", name, desc), make)

    def exchange(self, recv, send):
        t = self.t
        worst = np.maximum(recv, send)
        return t.exchange_phase_cycles + -(-worst // t.exchange_bytes_per_cycle)

    def matmul(self, n: int, descs: tuple) -> np.ndarray:
        """Cycles of matmul n for every grid, its inputs in layouts `descs`: the operand
        exchange (receivers: their blocks; senders: every byte times its replication,
        gn for A, gm for B) plus the rest of plan/matmul.py's estimate. Infinite when
        an input's layout cannot be gathered in whole words. Grids with `relay` (options
        from with_relay) first spread A over idle tiles (plan/relay.py): that exchange
        superstep and its sync, then the gather from the pieces; infinite where A's
        layout has no idle tiles to spread to."""
        def make():
            op, o = self.g.ops[n], self.opt[n]
            per_tile = []
            for which, (name, d) in enumerate(zip(op.inputs, descs)):
                e = DTYPE_BYTES[self.g.tensors[name].dtype]
                b, w = self.blocks(name, d), operand_windows(op, which)
                if d != PANELS and not word_aligned(b, w, e):   # panel spans are whole words
                    return np.full(len(o), np.inf)
                per_tile.append(tile_elems(b, w, self.t.tiles) * e)
            plain = self._gather(n, per_tile, descs[1])
            if "relay" not in o.a:
                return plain
            r = self.relay(op.inputs[0], descs[0])
            if r is None:
                return np.where(o.a["relay"] == 1, np.inf, plain)
            pieces, cost = r
            e = DTYPE_BYTES[self.g.tensors[op.inputs[0]].dtype]
            spread_a = tile_elems(pieces, operand_windows(op, 0), self.t.tiles) * e
            return np.where(o.a["relay"] == 1, cost + self._gather(n, [spread_a, per_tile[1]], descs[1]), plain)
        return self._memo(("matmul", n, descs), make)

    def _gather(self, n: int, per_tile: list, b_desc) -> np.ndarray:
        """The operand exchange and the rest of the estimate, given the bytes each tile
        holds of A and of B (per_tile: [T] each) and B's layout."""
        op, o = self.g.ops[n], self.opt[n]
        if self.bcast:         # each held byte is one multicast send to its gn (A) or gm (B) readers
            o = Options(o.op, {**o.a, "gn": np.minimum(o.a["gn"], 1), "gm": np.minimum(o.a["gm"], 1)})
        U = pareto(np.stack(per_tile, 1))                     # [rows, 2]
        both = (U @ np.stack([o.a["gn"], o.a["gm"]])).max(0)
        homes = self.exchange(o.a["recv"], both)
        B = self.g.tensors[op.inputs[1]]
        if panel_elems(self.t, B.dtype) and b_desc != PANELS and not op.attr("transpose_b", False):
            homes = np.full(len(o), np.inf)      # a byte-wise permutation, never a choice (a transposed
            # row-major B is whole rows of each panel: expand/matmul.py transposed_panels)
        if "ring" in o.a:                          # B from ring homes (plan/ring.py)
            homes = np.where(o.a["ring"] == 1, ring_exchange(self, o, per_tile[0]), homes)
        if "still" not in o.a:
            return homes + o.a["rest"]
        # a resident grid's B never moves: only A is received and sent
        alone = self.exchange(o.a["recv_a"], per_tile[0].max() * o.a["gn"])
        if "ring" in o.a:                          # resident: where its home is does not matter
            alone = np.where(o.a["ring"] == 1, np.inf, alone)
        return np.where(o.a["still"] == 1, alone, homes) + o.a["rest"]

    def relay(self, name: str, desc):
        """Layout `desc` of `name` spread by the relay: (pieces as blocks, cycles of the
        relay superstep: its exchange and its sync), or None (plan/relay.py)."""
        def make():
            T, e = self.t.tiles, DTYPE_BYTES[self.g.tensors[name].dtype]
            got = relay_blocks(self.blocks(name, desc), self.g.tensors[name].shape[1], T)
            if got is None:
                return None
            pieces, sent, recv = got
            return pieces, int(self.exchange(recv.max() * e, sent.max() * e)) + self.t.sync_cycles
        return self._memo(("relay", name, desc), make)

    def convert(self, name: str, src, dst) -> int:
        """One exchange superstep re-laying `name` from src to dst, and the sync of the
        compute superstep it splits off."""
        def make():
            T, e = self.t.tiles, DTYPE_BYTES[self.g.tensors[name].dtype]
            everything = np.array([[0, 1 << 40, 0, 1 << 40]])
            if not word_aligned(self.blocks(name, src), everything, e):
                return np.inf
            recv = tile_elems(self.blocks(name, dst), everything, T) * e
            send = tile_elems(self.blocks(name, src), everything, T) * e
            return int(self.exchange(recv.max(), send.max())) + 2 * self.t.sync_cycles
        return self._memo(("convert", name, src, dst), make)

    def halves_gain(self, n: int, x: str, src, rows) -> int:
        """Cycles LayerNorm n over row halves costs more than over whole rows (`rows`: x's
        layout or its whole-rows copy), each with its exchange superstep's bytes counted in
        full: x's conversion and gamma and beta's columns every block receives (the beam
        leaves the latter out of every state alike; here the two layouts receive different
        amounts). inf where halves do not fit the row."""
        def make():
            R, C = self.g.tensors[x].shape
            e = DTYPE_BYTES[self.g.tensors[x].dtype]
            if not halves_fit(C, e):
                return np.inf
            T, everything = self.t.tiles, np.array([[0, 1 << 40, 0, 1 << 40]])

            def step_cost(dst):
                b = self.blocks(x, dst)
                params = np.bincount(b[4], b[3] * 2 * OUT_BYTES, minlength=T)
                if dst == src:
                    return int(self.exchange(params.max(), 0)) + 2 * self.t.sync_cycles
                recv = tile_elems(b, everything, T) * e + params
                send = tile_elems(self.blocks(x, src), everything, T) * e
                return int(self.exchange(recv.max(), send.max())) + 2 * self.t.sync_cycles
            whole = step_cost(rows) + self.compute(n, rows)
            return step_cost(HALVES) + halves_cycles(self.t, R, C) - whole
        return self._memo(("halves", n, src, rows), make)

    def compute(self, n: int, desc) -> int:
        """The busiest tile's kernels of elementwise or row-wise op n over its layout."""
        def make():
            op, t = self.g.ops[n], self.t
            y = self.g.tensors[op.outputs[0]]
            scaled, deferred = op.attr("scale", 1.0) != 1.0, bool(op.attr("deferred"))   # policy.deferred_norm
            fns = {"bias": t.bias_cycles,
                   "gelu": lambda r, k: t.gelu_cycles(r * k),
                   "cast": lambda r, k: t.cast_cycles(r * k, OUT_BYTES, DTYPE_BYTES[y.dtype]),
                   "add": lambda r, k: t.add_cycles(r * k, 1),
                   "layernorm": t.layernorm_cycles,
                   "softmax": lambda r, k: t.softmax_cycles(r, k, scaled, deferred)}
            blocks = self.blocks(op.inputs[0], desc)
            fn, cols = fns[op.kind], np.unique(blocks[3])
            if self.row_calls and op.kind in ("layernorm", "softmax") and len(cols) == 1:
                k = int(cols[0])                     # expand issues these blocks as row chunks: price them so
                e = min(DTYPE_BYTES[self.g.tensors[op.inputs[0]].dtype], OUT_BYTES)
                fn = lambda r, _k, f=fns[op.kind]: chunked_cycles(r, lambda m: f(m, k), row_quantum(k * e))
            return per_tile_cost(blocks, fn, t.tiles)
        return self._memo(("compute", n, desc), make)


@dataclass
class State:
    cycles: int
    choice: tuple          # (op index, grid index, rotation) per matmul so far
    lay: dict              # tensor -> layout descriptor
    load: np.ndarray | None = None   # resident weight bytes per tile so far (None: no residency)
    cursor: int = 0        # the next resident grid's first tile (grids laid one after another around the tiles)
    homes: int = 0         # per-tile bytes of the stationary weights' homes still in homes
    work: int = 0          # the largest working set (operands, partials) of a grid chosen so far
    peak0: int = 0         # the largest plan memory figure of a grid chosen so far, without ring copies
    extra: int = 0         # bytes ring copies add to every tile they sit on (policy.ring_copies), summed
    r1: int = 0            # region-1 bytes of ring pieces read in place on a tile (policy.ring_in_place), summed
    r1_seq: int = 0        # those of r1 that are Repeat sequences (one pooled request: whole element pairs)
    halves: frozenset = frozenset()   # LayerNorm ops laid in row halves (policy.ln_halves)


def step(c: Costs, n: int, op, s: State) -> State:
    """A non-matmul op: its cost in state s and the layout of its output."""
    lay = dict(s.lay)
    x = op.inputs[0]
    cyc = 0
    if op.kind in ("bias", "gelu", "cast"):
        out = lay[x]
    elif op.kind == "add":
        out = lay[x]
        if lay[op.inputs[1]] != out:
            cyc += c.convert(op.inputs[1], lay[op.inputs[1]], out)
    elif op.kind in ("layernorm", "softmax"):
        out = lay[x]
        if out != ROWS and not full_rows(c.blocks(x, out)):
            cyc += c.convert(x, out, ROWS)      # a converted copy: x itself keeps its layout
            out = ROWS
        if op.kind == "layernorm" and c.ln_halves:
            delta = c.halves_gain(n, x, lay[x], out)
            if delta < 0:                       # row halves: whole rows' price + the difference
                lay[op.outputs[0]] = HALVES
                return replace(s, cycles=s.cycles + cyc + c.compute(n, out) + delta, lay=lay,
                               halves=s.halves | {n})
    else:
        lay[op.outputs[0]] = ROWS
        return replace(s, lay=lay)
    cyc += c.compute(n, out)
    lay[op.outputs[0]] = out
    return replace(s, cycles=s.cycles + cyc, lay=lay)


def best(totals: np.ndarray, k: int) -> np.ndarray:
    """Flat indices of the k smallest totals, ties to the lower index (deterministic)."""
    flat = totals.ravel()
    k = min(k, flat.size)
    thr = np.partition(flat, k - 1)[k - 1]
    cand = np.flatnonzero(flat <= thr)
    return cand[np.lexsort((cand, flat[cand]))][:k]


def cheapest(cycles: np.ndarray, rows: list, k: int, drop) -> np.ndarray:
    """best(totals, k) of totals[s] = cycles[s] + rows[s] once every finite total that
    drop(flat indices) prunes is inf, without forming every total: drop is asked only
    about a prefix of best's order (4k, 4x longer while too few stand), and a prefix of
    K < N comes from each row's own K first (best of each distinct row: states with the
    same layouts share one), since no total of a row can be in the prefix while K of its
    row come before it. The same indices as the full form."""
    N, K = len(rows[0]), 4 * k
    while True:
        if K < N:
            first, order = [], {}
            for r in rows:
                if id(r) not in order:
                    order[id(r)] = best(r, K)
                first.append(order[id(r)])
            cand = np.concatenate([s * N + f for s, f in enumerate(first)])
            val = np.concatenate([cycles[s] + r[f] for s, (r, f) in enumerate(zip(rows, first))])
            top = np.lexsort((cand, val))[:K]
            pool, v = cand[top], val[top]
        else:
            totals = np.stack([c + r for c, r in zip(cycles, rows)])
            pool = best(totals, K)
            v = totals.ravel()[pool]
        ok = np.isfinite(v)
        if ok.any():
            ok[ok] = ~drop(pool[ok])
        if ok.sum() >= k or len(pool) == len(rows) * N or not np.isfinite(v[-1]):
            return pool[ok][:k]
        K *= 4


def beam_search(graph, target: Target, options: dict[int, Options], width: int, keep: int,
                res: Residency | None = None, panels: dict | None = None, costs: Costs | None = None,
                pricing: Pricing = Pricing(), reserve: int = 0):
    """The `keep` cheapest complete states of a beam of `width` (best first), each as
    (estimated cycles, ((op index, grid index, rotation), ...)).

    Weight-stationary choice (`res`): its matmuls' options hold every grid twice
    (`still` 0: B gathered from homes; 1: B resident, never moving, count × its block
    on every tile of the grid). Resident grids are laid one after another around the
    tiles (Grid.rot: each starts where the previous ended), so their blocks spread
    over all tiles instead of piling up on the first ones; the state keeps the
    resident bytes of every tile and checks the fullest against the budgets of `res`.
    `panels`: the weights whose homes are micro-panel grids (plan/homes.py
    panel_weights); `costs`: a Costs of the same options to reuse (its cache);
    `reserve`: bytes of a tile that options' memory figures leave out and ring copies,
    whole-unit pieces and their pair padding must leave too (plan.with_lean's support
    reserve: its grids' figures exclude it, so without it those extras took the reserve
    and expand rejected every lean candidate holding them: #26, tests/test_unit_padding.py)."""
    panels = panels or {}
    T = target.tiles
    c = costs or Costs(graph, target, options, panels, pricing)
    counts = res.counts if res else {}
    lay = {n: PANELS if n in panels else ROWS for n, t in graph.tensors.items() if t.kind in ("input", "param")}
    states = [State(0, (), lay, np.zeros(T, np.int64) if counts else None, 0,
                    sum(res.homes.values()) if res else 0)]
    if counts:
        size = {n: graph.tensors[graph.ops[n].inputs[1]].nbytes for n in counts}
        whole = res.region1 * T                     # over all tiles: grids laid around them share it
        share = {n: whole * size[n] // max(1, sum(size.values())) if res.shared else whole for n in counts}
    last = max(options, default=-1)
    for n, op in enumerate(graph.ops):
        if not states:
            return []                       # every state met a layout it cannot gather
        if op.kind != "matmul":
            states = [step(c, n, op, s) for s in states]
            continue
        o = options[n]
        rows = [c.matmul(n, tuple(s.lay[x] for x in op.inputs)) for s in states]
        cycles = np.array([s.cycles for s in states])
        N = len(rows[0])
        z = np.zeros(N, np.int64)
        grid = {k: o.a[k] if k in o.a else z for k in ("extra", "r1", "r1_seq")}
        grid["base"] = o.a["mem"] - grid["extra"]
        if counts:
            still = o.a["still"] == 1 if n in counts else np.zeros(N, bool)
            tiles = o.a["gg"] * o.a["gm"] * o.a["gn"] * o.a["gk"]
            own = counts.get(n, 0) * (-(-o.a["b_blk"] // 16) * 16) * still      # per tile of the grid
            grid.update(still=still, tiles=tiles, own=own, gm=o.a["gm"], work=o.a["mem"] - res.base,
                        gone=still * res.homes.get(n, 0))          # its home, no longer needed
        in_place = bool(grid["r1"].any() or any(s.r1 for s in states))
        drop = lambda f: pruned(states, f // N, f % N, grid, target, reserve, res if counts else None,
                                share.get(n, 0) if counts else 0, in_place)
        base, extra, r1, r1_seq = grid["base"], grid["extra"], grid["r1"], grid["r1_seq"]
        nxt = []
        for f in cheapest(cycles, rows, max(width, keep) if n == last else width, drop):
            s, i = states[f // N], int(f % N)
            rot, load, cursor, homes, work = 0, s.load, s.cursor, s.homes, s.work
            if counts:
                work = max(work, int(o.a["mem"][i] - res.base))
                if still[i]:
                    rot, k = s.cursor, int(tiles[i])
                    load = s.load.copy()
                    load[(rot + np.arange(k)) % T] += int(own[i])
                    cursor, homes = (rot + k) % T, homes - res.homes[n]
            nxt.append(State(s.cycles + rows[f // N][i], s.choice + ((n, i, rot),),
                             {**s.lay, op.outputs[0]: ("out", n, i, rot)}, load, cursor, homes, work,
                             max(s.peak0, int(base[i])), s.extra + int(extra[i]), s.r1 + int(r1[i]),
                             s.r1_seq + int(r1_seq[i]), s.halves))
        states = nxt
    states = sorted((s for s in states if np.isfinite(s.cycles)), key=lambda s: s.cycles)  # stable
    return [(int(s.cycles), s.choice) for s in states[:keep]]


def replay_halves(graph, target, options: dict, choice, panels: dict, pricing) -> frozenset:
    """The LayerNorm ops a found choice ((op, grid index, rotation) per matmul) lays in row
    halves: the beam's own steps re-walked with those grids (plan/beam.py keeps only the
    cycles and the matmul choice of a state)."""
    if not pricing.ln_halves:
        return frozenset()
    c = Costs(graph, target, options, panels, pricing)
    grid = {n: (i, rot) for n, i, rot in choice}
    s = State(0, (), {n: PANELS if n in panels else ROWS for n, t in graph.tensors.items()
                      if t.kind in ("input", "param")})
    for n, op in enumerate(graph.ops):
        if op.kind == "matmul":
            s.lay[op.outputs[0]] = ("out", n, *grid[n])
        else:
            s = step(c, n, op, s)
    return s.halves

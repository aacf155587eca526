"""plan's beam search (compiler/plan/beam.py) against an exhaustive enumeration.

The reference below is written separately and simply (Python loops over blocks and
tiles, one grid combination at a time) from the cost model the beam's docstring
states; it shares with the beam only the per-op inputs: each matmul's feasible
grids with their receive bytes and remaining cycles (plan.matmul_options) and the
target's cost functions."""
import itertools
import math
from functools import lru_cache

import pytest

from compiler.ir import Graph
from compiler.phases import model_phase, policy_of, target_of
from compiler.plan import home_bytes, matmul_options, plan
from compiler.plan.beam import beam_search as _beam_search
from compiler.plan.homes import panel_weights
from compiler.target import DTYPE_BYTES, ConfigError
from helpers import target_cfg

MODELS = {   # name -> (model, grids kept per matmul for the exhaustive enumeration)
    "mlp": (dict(name="mlp", tokens=24, width=32, hidden=64), 40),
    "vit": (dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=16, layers=1), 5),
    "vit-fp8": (dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=2,
                     fp8_activations=True), 5),
}


def beam_search(g, t, opts, width, keep):
    return _beam_search(g, t, opts, width, keep, panels=panel_weights(g, t))


def cfg_of(model, **policy):
    return dict(model=model, target=target_cfg("tiny"), policy=policy)


@pytest.fixture(scope="module", params=list(MODELS))
def setup(request):
    model, k = MODELS[request.param]
    cfg = cfg_of(model)
    m, t = model_phase(cfg), target_of(cfg)
    g = m.graph
    opts = {n: matmul_options(g, n, t, policy_of(cfg), home_bytes(g, t, panel_weights(g, t)))[0]
            for n, op in enumerate(g.ops) if op.kind == "matmul"}
    return g, t, {n: o.take(slice(0, k)) for n, o in opts.items()}


class Reference:
    """The cost model, one combination at a time."""

    def __init__(self, g, t, opts):
        self.g, self.t, self.opts = g, t, opts
        # weights the AMP reads as micro-panels: their homes hold whole panel spans
        self.panels = {op.inputs[1]: t.amp_panel_elems[g.tensors[op.inputs[1]].dtype] for op in g.ops
                       if op.kind == "matmul" and g.tensors[op.inputs[1]].kind == "param"
                       and g.tensors[op.inputs[1]].dtype in t.amp_panel_elems}

    def grid(self, n, i):
        return {f: int(v[i]) for f, v in self.opts[n].a.items()}

    # layouts: tuples of blocks (r0, r1, c0, c1, tile) ------------------------------
    def home(self, name):
        rows, cols = self.g.tensors[name].shape
        T = self.t.tiles
        if name not in self.panels:
            b = -(-rows // min(T, rows))
            n = -(-rows // b)
            return tuple((k * b, min(rows, k * b + b), 0, cols, k * T // n) for k in range(n))
        P = self.panels[name]                # whole panel rows × column chunks, tiles spread
        npanel = math.ceil(rows / P)
        hb = P * math.ceil(npanel / T)
        nrb = math.ceil(rows / hb)
        cb = math.ceil(cols / min(cols, max(1, T // nrb)))
        ncb = math.ceil(cols / cb)
        n = nrb * ncb
        return tuple((i * hb, min(rows, i * hb + hb), j * cb, min(cols, j * cb + cb), (i * ncb + j) * T // n)
                     for i in range(nrb) for j in range(ncb))

    @lru_cache(maxsize=None)
    def out(self, n, i):
        op, gr = self.g.ops[n], self.grid(n, i)
        M, N = op.attr("m"), op.attr("n")
        groups = op.attr("groups", ((0,) * 6,))
        blocks = []
        for g, grp in enumerate(groups):
            for bi in range(gr["gm"]):
                for j in range(gr["gn"]):
                    for l in range(gr["gk"]):
                        tile = (((g // gr["gb"]) * gr["gm"] + bi) * gr["gn"] + j) * gr["gk"] + l
                        r0, r1 = bi * gr["mb"], min(M, bi * gr["mb"] + gr["mb"])
                        if gr["gk"] > 1:       # reducer l keeps rows [l·rr, (l+1)·rr) of the block
                            rr = 2 * math.ceil(gr["mb"] / (2 * gr["gk"]))
                            r0, r1 = min(r1, r0 + l * rr), min(r1, r0 + l * rr + rr)
                        c0, c1 = j * gr["nb"], min(N, j * gr["nb"] + gr["nb"])
                        if r1 > r0:
                            blocks.append((grp[4] + r0, grp[4] + r1, grp[5] + c0, grp[5] + c1, tile))
        return tuple(blocks)

    # costs ----------------------------------------------------------------------
    def exchange(self, recv, sends):
        t = self.t
        worst = max(recv, max(sends.values(), default=0))      # per tile, no pair bonus
        return t.exchange_phase_cycles + math.ceil(worst / t.exchange_bytes_per_cycle)

    @staticmethod
    def area(b, w):
        rows = min(b[1], w[0] + w[1]) - max(b[0], w[0])
        cols = min(b[3], w[2] + w[3]) - max(b[2], w[2])
        return max(rows, 0) * max(cols, 0)

    def sends(self, lay, windows, ebytes, rep, acc, words=True):
        """Adds each tile's bytes in the windows × rep to acc; False if a block read
        does not start and end on a 32-bit word (checked when `words`)."""
        w = max(1, 4 // ebytes) if words else 1
        for b in lay:
            a = sum(self.area(b, win) for win in windows)
            if a:
                if b[2] % w or b[3] % w:
                    return False
                acc[b[4]] = acc.get(b[4], 0) + a * ebytes * rep
        return True

    @lru_cache(maxsize=None)
    def matmul(self, n, i, lays):
        op, gr = self.g.ops[n], self.grid(n, i)
        M, K, N = op.attr("m"), op.attr("k"), op.attr("n")
        groups = op.attr("groups", ((0,) * 6,))
        tb = op.attr("transpose_b", False)
        wa = {(g[0], M, g[1], K) for g in groups}
        wb = {(g[2], N, g[3], K) if tb else (g[2], K, g[3], N) for g in groups}
        acc = {}
        b = op.inputs[1]
        if self.g.tensors[b].dtype in self.t.amp_panel_elems and lays[1] != self.home(b) and not tb:
            return math.inf           # micro-panels from row-major blocks: a byte-wise permutation
            # (a transposed b's panels are whole rows of its row-major blocks: any layout will do)
        for name, lay, win, rep in zip(op.inputs, lays, (wa, wb), (gr["gn"], gr["gm"])):
            words = name not in self.panels     # panel spans are whole words anyway
            if not self.sends(lay, win, DTYPE_BYTES[self.g.tensors[name].dtype], rep, acc, words):
                return math.inf
        return self.exchange(gr["recv"], acc) + gr["rest"]

    @lru_cache(maxsize=None)
    def convert(self, name, src, dst):
        e = DTYPE_BYTES[self.g.tensors[name].dtype]
        everything = [(0, 1 << 40, 0, 1 << 40)]
        acc, recv = {}, {}
        if not self.sends(src, everything, e, 1, acc):
            return math.inf
        for b in dst:
            recv[b[4]] = recv.get(b[4], 0) + (b[1] - b[0]) * (b[3] - b[2]) * e
        return self.exchange(max(recv.values()), acc) + 2 * self.t.sync_cycles

    @lru_cache(maxsize=None)
    def compute(self, n, lay):
        t, op = self.t, self.g.ops[n]
        e_out = DTYPE_BYTES[self.g.tensors[op.outputs[0]].dtype]
        fn = {"bias": t.bias_cycles, "gelu": lambda r, k: t.gelu_cycles(r * k),
              "cast": lambda r, k: t.cast_cycles(r * k, 2, e_out),
              "add": lambda r, k: t.add_cycles(r * k, 1),
              "layernorm": t.layernorm_cycles,
              "softmax": lambda r, k: t.softmax_cycles(r, k, op.attr("scale", 1.0) != 1.0)}[op.kind]
        per = {}
        for b in lay:
            per[b[4]] = per.get(b[4], 0) + int(fn(b[1] - b[0], b[3] - b[2]))
        return max(per.values())

    def total(self, choice: dict):
        """Estimated cycles of one grid per matmul: the graph walked in order."""
        lay = {n: self.home(n) for n, x in self.g.tensors.items() if x.kind in ("input", "param")}
        cyc = 0
        for n, op in enumerate(self.g.ops):
            x = op.inputs[0]
            if op.kind == "matmul":
                cyc += self.matmul(n, choice[n], tuple(lay[v] for v in op.inputs))
                out = self.out(n, choice[n])
            elif op.kind in ("bias", "gelu", "cast"):
                out = lay[x]
                cyc += self.compute(n, out)
            elif op.kind == "add":
                out = lay[x]
                if lay[op.inputs[1]] != out:
                    cyc += self.convert(op.inputs[1], lay[op.inputs[1]], out)
                cyc += self.compute(n, out)
            else:                                  # layernorm, softmax: whole rows
                out = lay[x]
                if len({b[2] for b in out}) > 1:
                    rows = self.home(x)
                    cyc += self.convert(x, out, rows)
                    out = rows
                cyc += self.compute(n, out)
            lay[op.outputs[0]] = out
        return cyc


def exhaustive(g, t, opts):
    ref = Reference(g, t, opts)
    ops = list(opts)
    return min((ref.total(dict(zip(ops, c))), c) for c in itertools.product(*(range(len(opts[n])) for n in ops)))


def test_wide_beam_finds_the_exhaustive_best(setup):
    g, t, opts = setup
    best, combo = exhaustive(g, t, opts)
    assert best < math.inf
    width = math.prod(len(o) for o in opts.values())
    found = beam_search(g, t, opts, width, 4)
    assert found[0][0] == best
    ref = Reference(g, t, opts)
    for cyc, choice in found:       # every reported estimate is the reference's total for its grids
        assert ref.total({n: i for n, i, _ in choice}) == cyc
    assert [c for c, _ in found] == sorted(c for c, _ in found)
    assert len({ch for _, ch in found}) == len(found)


def test_width_one_is_greedy_and_never_better(setup):
    g, t, opts = setup
    ref = Reference(g, t, opts)
    greedy = beam_search(g, t, opts, 1, 1)
    wide = beam_search(g, t, opts, 64, 1)
    assert wide
    # greedy: each matmul takes the grid cheapest given the grids before it (ties: first)
    choice = {}
    for n in opts:
        head = Reference(Graph(g.name, g.tensors, g.ops[:n + 1]), t, opts)   # the ops up to n

        def upto(i):
            return head.total({**choice, n: i})
        choice[n] = min(range(len(opts[n])), key=lambda i: (upto(i), i))
    if not greedy:     # the greedy path chose an FP8 layout no consumer grid can gather
        assert ref.total(choice) == math.inf
        return
    assert greedy[0][0] >= wide[0][0]
    assert {n: i for n, i, _ in greedy[0][1]} == choice
    assert greedy[0][0] == ref.total(choice)


def test_plan_is_deterministic_and_distinct():
    cfg = cfg_of(MODELS["vit"][0], plan_candidates=6)
    m = model_phase(cfg)
    runs = [plan(m, target_of(cfg), policy_of(cfg)) for _ in range(2)]
    labels = [[(c.label, c.cycles) for c in r.candidates] for r in runs]
    assert labels[0] == labels[1] and len(labels[0]) >= 6     # + policy.attn_variants' (plan/attn.py)
    assert len({lab for lab, _ in labels[0]}) == len(labels[0])
    assert [c for _, c in labels[0]] == sorted(c for _, c in labels[0])


def test_beam_zero_is_the_rank_aligned_ablation():
    cfg = cfg_of(MODELS["mlp"][0], plan_beam=0, plan_candidates=3)
    m = model_phase(cfg)
    p = plan(m, target_of(cfg), policy_of(cfg))
    g, t = m.graph, target_of(cfg)
    opts = {n: matmul_options(g, n, t, policy_of(cfg), home_bytes(g, t, panel_weights(g, t)))[0]
            for n, op in enumerate(g.ops) if op.kind == "matmul"}
    for c, cand in enumerate(p.candidates):
        assert cand.grids == {n: o.grid(c) for n, o in opts.items()}


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_plan_beam_must_be_a_non_negative_integer(bad):
    with pytest.raises(ConfigError, match="plan_beam"):
        policy_of(cfg_of(MODELS["mlp"][0], plan_beam=bad))


def test_resident_windows_match_a_tile_by_tile_count():
    """The resident beam's fullest tile inside and outside a grid laid from the cursor
    (plan/budgets.py windows) against the tiles enumerated one by one."""
    import numpy as np

    from compiler.plan.budgets import windows as _windows
    rng = np.random.default_rng(0)
    for T in (1, 5, 64):
        for _ in range(20):
            load, cursor = rng.integers(0, 100, T), int(rng.integers(0, T))
            pre, post = _windows(load, cursor)
            for n in range(1, T + 1):
                inside = {(cursor + k) % T for k in range(n)}
                assert pre[n - 1] == max(load[t] for t in inside)
                assert post[n] == max([load[t] for t in range(T) if t not in inside], default=0)


def test_cheapest_is_best_of_the_pruned_totals():
    """beam.cheapest (each row's own first K, the prune asked only about a prefix) against
    the plain form written here: every total formed, the pruned set to inf, sorted by
    (total, flat index), the finite first k. Rows share arrays (states with the same
    layouts), totals tie, some are infinite, and the prune is dense or sparse, so the
    prefix must grow or fall back to every total."""
    import numpy as np

    from compiler.plan.beam import cheapest
    rng = np.random.default_rng(1)
    for trial in range(300):
        S, N, k = int(rng.integers(1, 9)), int(rng.integers(1, 300)), int(rng.integers(1, 12))
        shared = [np.where(rng.random(N) < 0.1, np.inf, rng.integers(0, 3, N).astype(float)) for _ in range(3)]
        rows = [shared[int(rng.integers(0, 3))] for _ in range(S)]
        cycles = rng.integers(0, 4, S).astype(float)
        bad = rng.random(S * N) < rng.choice([0.0, 0.3, 0.95])
        asked = []

        def drop(f):
            asked.append(len(f))
            return bad[f]
        got = cheapest(cycles, rows, k, drop)
        flat = np.concatenate([c + r for c, r in zip(cycles, rows)])
        flat[bad] = np.inf
        want = [f for f in sorted(range(S * N), key=lambda f: (flat[f], f)) if np.isfinite(flat[f])][:k]
        assert list(got) == want, trial
        assert sum(asked) <= 4 * S * N

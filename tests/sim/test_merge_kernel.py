"""MERGE (split-key attention's merge of partial states, compiler/sim/merge_kernel.py) on the
simulator against an independent float64 reference: random scores split over key groups,
each split's partial state made here in float64 (m_j, l_j, O_j rounded to f16), the merge
held to softmax(S)·V; mutants of the kernel's arithmetic are caught by the same check. Its
cost: hand-worked figures, the oracle equal to target.py on a grid, each term of
compiler/costs/merge.py mutated caught by the oracle."""
import numpy as np
import pytest
import yaml

from compiler import isa, sim
from compiler.costs import merge as merge_costs
from compiler.sim import merge_kernel, oracle
from compiler.target import Target
from helpers import REPO

from .asm import R0_DATA, R0_DATA2, R1, Asm

TILES = [0, 3, 7, 20]
U = 2.0 ** -11
IPU21 = yaml.safe_load((REPO / "conf" / "target" / "ipu21.yaml").read_text())


def _case(seed, r, d, s, n):
    """Per tile: scores [r, n] (split j's keys shifted by 3j, so the maxima differ), V [n, d];
    the partial states in float64 and the exact attention."""
    rng = np.random.default_rng(seed)
    S = (rng.standard_normal((r, n)) * 2 + np.repeat(3.0 * np.arange(s), -(-n // s))[:n]).astype(np.float16)
    V = rng.standard_normal((n, d)).astype(np.float16)
    cut = np.linspace(0, n, s + 1).astype(int)
    parts, ms, ls = [], [], []
    for j in range(s):
        sj = S[:, cut[j]:cut[j + 1]].astype(np.float64)
        m = sj.max(1)
        p = np.exp(sj - m[:, None])
        parts.append((p @ V[cut[j]:cut[j + 1]].astype(np.float64)).astype(np.float16))
        ms.append(m.astype(np.float32))
        ls.append(p.sum(1).astype(np.float32))
    s64 = S.astype(np.float64)
    P = np.exp(s64 - s64.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    ref, mag = P @ V.astype(np.float64), P @ np.abs(V.astype(np.float64))
    return np.stack(parts), np.concatenate([np.stack(ms), np.stack(ls)]).astype(np.float32), ref, mag


def _run(r, d, s, cases):
    a = Asm()
    bufs = {}
    for name, addr, k in (("parts", R1, 0), ("stats", R0_DATA2, 1)):
        data = [c[k] for c in cases]
        rows, o = [], 0
        for t, x in zip(TILES, data):
            b = np.ascontiguousarray(x).view(np.uint8).reshape(-1)
            rows.append((o, t, addr, len(b), 1, len(b), len(b)))
            o += len(b)
        a.stream_in(name, rows)
        bufs[name] = np.concatenate([np.ascontiguousarray(x).view(np.uint8).reshape(-1) for x in data])
    for t in TILES:
        a.on(t, isa.MERGE, R0_DATA, R1, R0_DATA2, r, d, s, dtype="f16")
    a.sync()
    nb = 2 * r * d
    a.stream_out("y", nb * len(TILES), [(i * nb, t, R0_DATA, nb, 1, nb, nb) for i, t in enumerate(TILES)])
    res = sim.run(a.build(), bufs)
    return res, res.outputs["y"].view(np.float16).reshape(len(TILES), r, d).astype(np.float64)


def _bad(got, ref, mag):
    """Elements outside the bound: the partials' f16 rounding (u of P|V| each, plus l's f32),
    the merged output's own rounding (an ulp), 2u to spare."""
    return np.abs(got - ref) > 4 * U * mag + U * np.abs(ref) + 2.0 ** -24


SHAPES = [(6, 16, 3, 37), (10, 72, 10, 73), (2, 8, 2, 5), (4, 24, 7, 90)]   # rows, cols, splits, keys


@pytest.mark.parametrize("shape", SHAPES)
def test_merge_equals_attention(shape):
    r, d, s, n = shape
    cases = [_case(100 * i + r, r, d, s, n) for i in range(len(TILES))]
    res, Y = _run(r, d, s, cases)
    for i, (_, _, ref, mag) in enumerate(cases):
        assert not _bad(Y[i], ref, mag).any(), (shape, np.abs(Y[i] - ref).max())
        assert res.tile_cycles[0, TILES[i]] == Asm().t.merge_cycles(r, d, s)


KERNEL_MUTANTS = {   # each breaks one step of the merge; the same check must fail
    "no rescale (c = 1)": ("exp", lambda x: np.ones_like(x)),
    "rescale by the wrong sign": ("exp", lambda x: np.exp(-x).astype(np.float32)),
}


@pytest.mark.parametrize("mutant", list(KERNEL_MUTANTS))
def test_a_wrong_merge_is_caught(mutant, monkeypatch):
    name, fn = KERNEL_MUTANTS[mutant]
    monkeypatch.setattr(merge_kernel.fmath, name, fn)
    r, d, s, n = SHAPES[1]
    cases = [_case(100 * i + r, r, d, s, n) for i in range(len(TILES))]
    _, Y = _run(r, d, s, cases)
    assert any(_bad(Y[i], c[2], c[3]).any() for i, c in enumerate(cases))


def test_stats_read_as_m_then_l():
    """Swapping the m and l rows of the stats (a layout bug) is caught."""
    r, d, s, n = SHAPES[0]
    cases = [_case(7 + i, r, d, s, n) for i in range(len(TILES))]
    swapped = [(p, np.concatenate([st[s:], st[:s]]), ref, mag) for p, st, ref, mag in cases]
    _, Y = _run(r, d, s, swapped)
    assert any(_bad(Y[i], c[2], c[3]).any() for i, c in enumerate(cases))


def test_operand_rules_refuse_a_misaligned_stats():
    a = Asm()
    a.on(0, isa.MERGE, R0_DATA, R1, R0_DATA2 + 4, 2, 8, 2, dtype="f16")
    a.sync()
    with pytest.raises(Exception, match="MERGE operand stats .* not 8-byte aligned"):
        sim.run(a.build(), {})


# ---- its cost -----------------------------------------------------------------------------------
# (rows, cols, splits) -> cycles on ipu21 (6 workers, 8-byte vectors), worked term by term:
#   (10, 72, 10): the default trial's merge (R = 82 rows of a query block over 10 splits: 10 a tile)
#     max tree  BinaryOp1D MAXIMUM f32 (2 a loop, 4 cycles) on 50, 20, 10, 10 elements:
#               6(26 + ceil(ceil(50/6)/2) 4) + 11 = 287; 215; 191; 191            =   884
#     copy      40 + ceil(400 / 8)                                                   =    90
#     subtract  BinaryOp1D f32 on 100: 6(26 + ceil(17/2) 3) + 11                     =   329
#     exp       UnaryOp1D EXPONENT f32 on 100: 6(33 + ceil(17/2) 6) + 20             =   542
#     multiply  as subtract                                                          =   329
#     sum tree  BinaryOp1D ADD f32 (vector loop 1 + 2) on 50, 20, 10, 10:
#               6(26 + 5·3) + 11 = 257; 6(26 + 2·3) + 11 = 203; 185; 185              =   830
#     cast      Cast1D f32 -> f16 of 100 (tests/sim/test_costs.py's reading)         =   343
#     c_j O_j   BroadcastVectorOuterByRow MULTIPLY half, 100 rows of 72:
#               (15 + ceil(100/6)(7 + 18·2)) 6 + 11                                  =  4487
#     sum_j     poplin ReduceAdd, 720 outputs of 10 sources (cheaper than strided 4230):
#               90 loops, 15 a worker: (32 + 15 (3·10 + 8)) 6                        =  3612
#     1/L       ROWSCALE 10 x 72 with F_RECIP                                        =  1070
HAND = {(10, 72, 10): 12516}


@pytest.mark.parametrize("shape", list(HAND))
def test_hand_worked(shape):
    assert int(Target.from_dict(IPU21).merge_cycles(*shape)) == HAND[shape]


def _grid():
    r, c, s = np.meshgrid([1, 2, 5, 6, 7, 10, 13, 42], [2, 8, 16, 72, 100], [2, 3, 4, 7, 10, 16], indexing="ij")
    return r.ravel(), c.ravel(), s.ravel()


def _disagreements() -> int:
    t, f = Target.from_dict(IPU21), oracle._Figures(IPU21)
    r, c, s = _grid()
    w = np.zeros((len(r), isa.INSTR_WORDS), np.int64)
    w[:, 0] = isa.MERGE | isa.DTYPES["f16"] << 8
    w[:, 4], w[:, 5], w[:, 6] = r, c, s
    got = oracle.kernel_cycles(np.full(len(r), isa.MERGE), w, f)
    return int((got != np.asarray(t.merge_cycles(r, c, s))).sum())


def test_oracle_equals_target():
    assert _disagreements() == 0


_orig = {n: getattr(merge_costs, n) for n in ("tree_cycles", "binary_op_1d_cycles", "unary_op_1d_cycles",
                                              "add_cycles", "by_row_cycles", "rowscale_cycles",
                                              "row_value_to_half_cycles")}
COST_MUTANTS = {
    "max as one vertex of all splits": ("tree_cycles", lambda r, s, op, W, V: _orig["binary_op_1d_cycles"](
        np.asarray(r) * np.asarray(s), merge_costs.PERF[(op, "f32")], 4, W, V)),
    "exp at the half rate": ("unary_op_1d_cycles", lambda n, e, b, W, V, x: _orig["unary_op_1d_cycles"](
        n, merge_costs.PERF[("EXPONENT", "f16")], 2, W, V, x)),
    "sum over splits - 1 sources": ("add_cycles", lambda n, k, W, V: _orig["add_cycles"](n, np.maximum(k - 1, 1), W, V)),
    "rescale on the r rows only": ("by_row_cycles", lambda n, c, op, W, V: _orig["by_row_cycles"](
        np.maximum(np.asarray(n) // 2, 1), c, op, W, V)),
    "no reciprocal": ("rowscale_cycles", lambda r, c, a, q, W, V: _orig["rowscale_cycles"](r, c, a, 0, W, V)),
    "no cast of c": ("row_value_to_half_cycles", lambda n, W, V: 0 * np.asarray(n)),
}


@pytest.mark.parametrize("mutant", list(COST_MUTANTS))
def test_each_mutated_merge_term_is_caught(mutant, monkeypatch):
    name, fn = COST_MUTANTS[mutant]
    monkeypatch.setattr(merge_costs, name, fn)
    assert _disagreements() > 0

"""policy.f32_partials: a k-split's MATMULs write f32 partials (isa F_F32_OUT, no output cast),
the exchange moves them as f32, and one ADD of f32 sources (dtype2 f32) sums them in a fixed
order and rounds once to f16, as PopLibs' float conv partials with ReduceAdd<half, float>.

- the reduction's cost against a plain recount of the cited PopLibs formulas (loops counted one
  output at a time, sharing no code with compiler/costs/), and the oracle's against target.py's,
  with mutants of the new term caught;
- the kernels on hand-built programs against a plain-Python oracle (exact sums by Fraction,
  one f32 rounding a partial, f32 additions in order, one f16 rounding);
- the tiny target's GEMM and ViT on the simulator with the flag on: validated, cycles as expand
  computed, the k-split error down to one rounding;
- injected faults (partials written as f16 while the ADD reads f32; one partial dropped) caught
  by the run's read-back.
"""
from fractions import Fraction
import math
import types

import numpy as np
import pytest

from compiler import isa, sim
from compiler.expand import graph as expand_graph
from compiler.expand import matmul as expand_matmul
from compiler.phases import compile_trial
from compiler.sim import oracle
from compiler.target import Target
from helpers import cfg, cost_term, set_cost_term, target_cfg, trial_ok
from .test_reduce_vertices import _emulate_reduce_add
from .asm import R0_DATA, R0_DATA2, R1, R1_B, Asm, get, put

W, VB = 6, 8                                  # ipu21: 6 workers, 64-bit loads
IPU21 = target_cfg("ipu21")


# ---- costs -----------------------------------------------------------------------------------
def _reduce_add_float_half(out_size: int, depth: int) -> int:
    """poplin getReduceCycleEstimate(outSize, depth, 64, isOutTypeFloat=false, isPartialsFloat=true,
    singleInput=false): accVectorWidth 4, 2 floats a 64-bit load, + 1 cycle a pointer."""
    return _emulate_reduce_add(out_size, depth, float_partials=True)


def _strided_float_half(out_size: int, depth: int) -> int:
    """popops getCyclesEstimateForStridedReduce, float partials, half out, ADD, not update, one
    outer stride, a worker's ceil(n / W) outputs: 2 + 2 + 6 + 5, then per 2 outputs
    3 + (3 + 2) + 3 + (depth - 1)."""
    per_worker = -(-out_size // W)
    loops = -(-per_worker // 2)
    return W * (2 + 2 + 6 + 5 + loops * (3 + (3 + 2) + 3 + (depth - 1)))


def test_f32_reduction_cost_is_the_cheaper_popLibs_vertex_recounted():
    t = Target.from_dict(IPU21)
    n, k = np.meshgrid(np.arange(1, 900), np.arange(1, 24), indexing="ij")
    got = t.add_cycles(n.ravel(), k.ravel(), True)
    want = [min(_reduce_add_float_half(a, b + 1), _strided_float_half(a, b + 1)) for a, b in zip(n.ravel(), k.ravel())]
    assert got.tolist() == want
    # both vertices are chosen somewhere; f32 partials cost more a reduction than f16 ones
    ra = np.array([_reduce_add_float_half(a, b + 1) for a, b in zip(n.ravel(), k.ravel())])
    assert (ra == got).any() and (ra != got).any()
    assert (got >= t.add_cycles(n.ravel(), k.ravel())).mean() > 0.9


def test_f32_reduction_hand_values():
    """Worked by hand from the two estimators (the half-partials figures: tests/sim/test_costs.py)."""
    t = Target.from_dict(IPU21)
    # fc1's 4-way split, 2304 outputs: ReduceAdd<half, float> 576 loops of 4 = 96 a worker:
    # 96 x (3 x 4 + 6) + 32 = 1760, x 6 (strided: 192 loops of 14 + 15 = 2703, x 6; half partials 5952)
    assert int(t.add_cycles(2304, 3, True)) == 10560
    # 2 sources, 96 outputs: 24 loops = 4 a worker: 4 x (3 x 2 + 6) + 32 = 80, x 6 (strided: 8 loops
    # of 12 + 15 = 111, x 6 = 666; half partials: BinaryOp1D 6 x (26 + 3 x 4) + 11 = 239)
    assert int(t.add_cycles(96, 1, True)) == 480 and int(t.add_cycles(96, 1)) == 239


def test_f32_out_matmul_drops_exactly_the_cast():
    t = Target.from_dict(IPU21)
    m, k, n = np.meshgrid(np.arange(1, 200, 7), [16, 72, 288], [16, 96, 216], indexing="ij")
    m, k, n = m.ravel(), k.ravel(), n.ravel()
    cast = (np.maximum(-(-(-(-(m * n) // W)) // 2), -(-(-(-(m * n) // W)) // 4)) + 26) * W
    assert (t.matmul_cycles(m, k, n, "f16") - t.matmul_cycles(m, k, n, "f16", "f16", True) == cast).all()
    assert (t.matmul_cycles(m, k, n, "fp8") == t.matmul_cycles(m, k, n, "fp8", "fp8", True)).all()   # no cast to drop


def _misses(fig, op, word0, fields, expect) -> int:
    nn = len(next(iter(fields.values())))
    w = np.zeros((nn, isa.INSTR_WORDS), np.int64)
    w[:, 0] = word0
    for i, v in fields.items():
        w[:, i] = v
    return int(np.sum(oracle.kernel_cycles(np.full(nn, op), w, oracle._Figures(fig)) != np.asarray(expect)))


def _f32_disagreements(fig: dict) -> int:
    t = Target.from_dict(fig)
    n, k = np.meshgrid(np.arange(1, 2500, 3), np.arange(0, 30), indexing="ij")
    n, k = n.ravel(), k.ravel()
    add = _misses(fig, isa.ADD, isa.ADD | isa.DTYPES["f16"] << 8 | isa.DTYPES["f32"] << 16, {4: k, 5: n},
                  t.add_cycles(n, k, True))
    m, kk, nn = np.meshgrid(np.arange(1, 120, 5), [16, 40, 288], [8, 96, 200], indexing="ij")
    m, kk, nn = m.ravel(), kk.ravel(), nn.ravel()
    mm = _misses(fig, isa.MATMUL, isa.MATMUL | isa.DTYPES["f16"] << 8 | isa.F_F32_OUT << 24, {4: m, 5: kk, 6: nn},
                 t.matmul_cycles(m, kk, nn, "f16", "f16", True))
    return add + mm


@pytest.mark.parametrize("target", ["ipu21", "tiny"])
def test_oracle_prices_f32_partials_as_target_does(target):
    assert _f32_disagreements(target_cfg(target)) == 0


_orig = cost_term("add_f32_reduce_cycles")
F32_MUTANTS = {
    "half partials' loop (8 outputs)": lambda n, s, W_, v: cost_term("add_conv_reduce_cycles")(n, s, W_, v),
    "ragged tail as a whole loop": lambda n, s, W_, v: _orig(np.asarray(n) + (-np.asarray(n)) % 4, s, W_, v),
    "one source fewer": lambda n, s, W_, v: _orig(n, np.asarray(s) - 1, W_, v),
}


@pytest.mark.parametrize("mutant", list(F32_MUTANTS))
def test_a_mutated_f32_reduction_is_caught(mutant, monkeypatch):
    set_cost_term(monkeypatch, "add_f32_reduce_cycles", F32_MUTANTS[mutant])
    assert _f32_disagreements(IPU21) > 0


def test_cast_still_charged_without_the_flag_is_caught(monkeypatch):
    """The oracle drops the cast only for F_F32_OUT: a target.py that kept it is caught."""
    real = cost_term("matmul_cycles")
    set_cost_term(monkeypatch, "matmul_cycles", lambda t, m, k, n, d, f32_out=False: real(t, m, k, n, d))
    assert _f32_disagreements(IPU21) > 0


# ---- kernels against a plain-Python oracle ------------------------------------------------------
def _f32(x: Fraction) -> float:
    """x rounded once to f32 (x must be a double exactly, which the test data keeps)."""
    assert Fraction(float(x)) == x
    return float(np.float32(float(x)))


def _oracle(A, B, scale, split):
    """Fixed order: partial p = f32(exact sum over its k slice) then f32(p * scale); out =
    f16(((p0 + p1) + p2) ...) with each addition rounded to f32."""
    m, n = A.shape[0], B.shape[1]
    s = Fraction(float(np.float32(scale)))
    out = np.zeros((m, n), np.float16)
    parts = []
    for k0, k1 in split:
        p = np.zeros((m, n))
        for r in range(m):
            for c in range(n):
                exact = sum((Fraction(float(A[r, i])) * Fraction(float(B[i, c])) for i in range(k0, k1)), Fraction(0))
                p[r, c] = _f32(Fraction(_f32(exact)) * s)
        parts.append(p)
    for r in range(m):
        for c in range(n):
            acc = parts[0][r, c]
            for p in parts[1:]:
                acc = _f32(Fraction(acc) + Fraction(p[r, c]))
            out[r, c] = np.float16(np.float32(acc))
    return parts, out


def test_f32_partials_and_their_reduction_against_plain_python():
    rng = np.random.default_rng(11)
    m, k, n, parts = 6, 48, 8, 3
    A = (rng.standard_normal((m, k)) * 2).astype(np.float16)
    B = (rng.standard_normal((k, n)) * 2).astype(np.float16)
    A[np.abs(A) < 0.05] = 0.5                  # no tiny values: every exact sum fits a double
    B[np.abs(B) < 0.05] = -0.5
    scale = 0.37
    kb = k // parts
    a = Asm()
    s = {}
    for t in range(parts):                     # tile t: its k slice, f32 partial out
        s[f"a{t}"] = put([t], R0_DATA, np.ascontiguousarray(A[:, t * kb:(t + 1) * kb]), a, f"a{t}")
        s[f"b{t}"] = put([t], R1, np.ascontiguousarray(B[t * kb:(t + 1) * kb]), a, f"b{t}")
    a.matmul(list(range(parts)), R0_DATA, R1, R0_DATA2, m, kb, n, scale=scale, flags=isa.F_F32_OUT).sync()
    pb = m * n * 4
    a.stream_out("p", parts * pb, [(t * pb, t, R0_DATA2, pb, 1, pb, pb) for t in range(parts)])
    res = sim.run(a.build(), s)
    P = get(res, "p", np.float32, (parts, m, n))
    want_parts, want = _oracle(A, B, scale, [(t * kb, (t + 1) * kb) for t in range(parts)])
    assert np.array_equal(P, np.asarray(want_parts, np.float32))
    assert res.tile_cycles[0, 0] == a.t.matmul_cycles(m, kb, n, "f16", "f16", True)

    b = Asm()                                  # the reduction on one tile: src0 + 2 partials, stride 8-aligned
    stride = -(-pb // 8) * 8 + 8
    rest = np.zeros((parts - 1, stride // 4), np.float32)
    rest[:, :m * n] = P[1:].reshape(parts - 1, -1)
    s = {"s0": put([2], R0_DATA, P[0], b, "s0"), "p": put([2], R1_B, rest, b, "p")}
    b.on(2, isa.ADD, R0_DATA2, R0_DATA, R1_B, parts - 1, m * n, stride, dtype="f16", dtype2="f32").sync()
    b.stream_out("o", 2 * m * n, [(0, 2, R0_DATA2, 2 * m * n, 1, 2 * m * n, 2 * m * n)])
    res = sim.run(b.build(), s)
    assert np.array_equal(get(res, "o", np.float16, (m, n)), want)
    assert res.tile_cycles[0, 2] == b.t.add_cycles(m * n, parts - 1, True)


def test_f32_partials_operands_are_checked():
    """An f32-partials ADD reads 4 bytes an element: a partial running past memory is refused."""
    b = Asm()
    end = b.t.memory_end
    b.on(0, isa.ADD, R0_DATA, R0_DATA, end - 200, 1, 64, 256, dtype="f16", dtype2="f32").sync()
    with pytest.raises(Exception, match="src1"):
        sim.run(b.build(), {})


# ---- trials on the simulator ---------------------------------------------------------------------
def _kern(r):
    return r["expand"].finalists[0].tilegraph.kern


def test_tiny_gemm_k_split_validates_with_one_rounding():
    off = compile_trial(cfg(m=40, k=128, n=72, dtype="f16", policy={"grid": "2x2x4"}))
    on = compile_trial(cfg(m=40, k=128, n=72, dtype="f16", policy={"grid": "2x2x4", "f32_partials": True}))
    for r in (off, on):
        assert trial_ok(r)
    k = _kern(on)
    mm, add = k["op"] == isa.MATMUL, k["op"] == isa.ADD
    assert ((k["dtype"][mm] >> 16) & isa.F_F32_OUT).all() and ((k["dtype"][add] >> 8) & 0xFF == isa.DTYPES["f32"]).all()
    assert not ((_kern(off)["dtype"] >> 16) & isa.F_F32_OUT).any()
    prog = on["lower"].program
    assert oracle.step_cycles(prog).tolist() == on["run"].cycles_per_step
    # one rounding instead of two: the k-split's error falls by orders of magnitude
    assert on["run"].max_abs_error * 16 < off["run"].max_abs_error
    # the partials exchange moves twice the bytes
    sx = lambda r: r["place"].tilegraph.analysis["step_cycles"][2]
    assert sx(on) > sx(off)


def test_fp8_k_split_keeps_half_partials():
    """FP8 x FP8: PopLibs' QUARTER AMP vertex has only half partials, so the flag leaves it."""
    r = compile_trial(cfg(m=40, k=128, n=72, dtype="fp8", policy={"grid": "2x2x4", "f32_partials": True}))
    assert trial_ok(r)
    assert not ((_kern(r)["dtype"] >> 16) & isa.F_F32_OUT).any()


TOWER = dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=16, layers=2)


@pytest.mark.parametrize("fp8", [False, True])
def test_tiny_vit_validates_with_the_flag(fp8):
    """FP8 activations: FP8 x FP8 k-splits keep half partials (f16 ones would not); either way
    validated, op by op, with the oracle's cycles."""
    model = dict(TOWER, fp8_activations=fp8, tokens=15 if fp8 else 16)
    r = compile_trial(dict(model=model, target=target_cfg("tiny"), policy=dict(f32_partials=True)))
    assert trial_ok(r)
    k = _kern(r)
    f32o = (k["op"] == isa.MATMUL) & (((k["dtype"] >> 16) & isa.F_F32_OUT) != 0)
    both_fp8 = (k["dtype"] & 0xFF == isa.DTYPES["fp8"]) & ((k["dtype"] >> 8) & 0xFF == 0)
    assert not (f32o & both_fp8).any() and (fp8 or f32o.any())     # (this FP8 plan splits no f16 matmul)
    assert oracle.step_cycles(r["lower"].program).tolist() == r["run"].cycles_per_step


def _faulty(monkeypatch, fault: str):
    if fault == "partials written as f16":          # the MATMULs lose F_F32_OUT, the ADDs still read f32
        fake = types.SimpleNamespace(**{k: v for k, v in vars(isa).items() if not k.startswith("__")})
        fake.F_F32_OUT = 0
        monkeypatch.setattr(expand_matmul, "isa", fake)
    else:                                            # every f32 reduction drops its last partial
        real = expand_graph.Ctx.kernel

        def kernel(self, **cols):
            if cols.get("op") == isa.ADD and (cols["dtype"] >> 8) & 0xFF == isa.DTYPES["f32"]:
                cols["i0"] = cols["i0"] - 1
            return real(self, **cols)
        monkeypatch.setattr(expand_graph.Ctx, "kernel", kernel)


@pytest.mark.parametrize("fault", ["partials written as f16", "one partial dropped"])
def test_injected_fault_is_caught_by_read_back(fault, monkeypatch):
    _faulty(monkeypatch, fault)
    r = compile_trial(cfg(m=40, k=128, n=72, dtype="f16", policy={"grid": "2x2x4", "f32_partials": True}))
    m = r["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0

"""MATMUL cycles = PopLibs' ConvPartial1x1Out estimate, ADD = popops' BinaryOp1D / strided
reduction estimates, BIAS = popops' BroadcastVectorInner1D ADD, GELU / SOFTMAX / ONLINE_SOFTMAX /
LAYERNORM / ROWSCALE / CAST = the sums of the popops / popnn vertices their counterparts run
(compiler/costs/: amp.py, vertices.py, vector.py).

Three kinds of check, none sharing code with compiler/costs/:
- hand transcriptions: the figures worked term by term in experiments/costs/README.md;
- the oracle (compiler/sim/oracle.py, its own reading of PopLibs) equals target.py on a
  brute-force grid of shapes and types;
- every term of compiler/costs/, mutated, makes that grid disagree."""
import numpy as np
import pytest
import yaml

from compiler import isa
from compiler.costs import DTYPE_BYTES, amp, vertices
from compiler.sim import oracle
from compiler.target import ConfigError, Target
from helpers import REPO, cost_term, set_cost_term

IPU21 = yaml.safe_load((REPO / "conf" / "target" / "ipu21.yaml").read_text())

# (m, k, n, b dtype, a dtype) -> cycles, each worked by hand in experiments/costs/README.md
HAND = {
    (82, 192, 128, "fp8", "f16"): 54509,   # the default trial's dominant shape: runs as f16
    (82, 192, 128, "fp8", "fp8"): 33883,   # the same with FP8 activations: the QUARTER vertex
    (12, 16, 16, "f16", "f16"): 643,       # equal workers: the 14-cycle tag cost decides the pass
    (3, 40, 20, "f16", "f16"): 1634,       # idle workers, ragged k and n groups
    (20, 8, 8, "f32", "f32"): 787,         # the float loop (8 cycles a row), 8 conv units
    (5, 64, 48, "fp8", "fp8"): 2356,       # QUARTER with an idle worker
    (1, 16, 16, "f16", "f16"): 491,        # one row
    (82, 72, 74, "f16", "f16"): 16085,     # the default trial's attention products (ragged k and n)
    (1, 64, 16, "fp8", "f16"): 1229,       # a one-row block of the default trial: overheads only
}


@pytest.mark.parametrize("shape", list(HAND))
def test_hand_transcriptions(shape):
    m, k, n, db, da = shape
    assert int(Target.from_dict(IPU21).matmul_cycles(m, k, n, db, da)) == HAND[shape]


def _grid():
    m, k, n = np.meshgrid(np.arange(1, 97), [1, 8, 15, 16, 17, 32, 33, 100, 192],
                          [1, 2, 8, 9, 16, 17, 40, 128], indexing="ij")
    return m.ravel(), k.ravel(), n.ravel()


PAIRS = [("f16", None), ("fp8", None), ("fp8", "f16"), ("f16", "fp8"), ("f32", None)]


def _disagreements(fig: dict) -> int:
    t, f = Target.from_dict(fig), oracle._Figures(fig)
    m, k, n = _grid()
    bad = 0
    for db, da in PAIRS:
        w = np.zeros((len(m), isa.INSTR_WORDS), np.int64)
        w[:, 0] = isa.MATMUL | isa.DTYPES[db] << 8 | (isa.DTYPES[da] << 16 if da else 0)
        w[:, 4], w[:, 5], w[:, 6] = m, k, n
        got = oracle.kernel_cycles(np.full(len(m), isa.MATMUL), w, f)
        bad += int(np.sum(got != np.asarray(t.matmul_cycles(m, k, n, db, da))))
    return bad


@pytest.mark.parametrize("target", ["ipu21", "tiny"])
def test_oracle_equals_target_on_a_grid(target):
    fig = yaml.safe_load((REPO / "conf" / "target" / f"{target}.yaml").read_text())
    assert _disagreements(fig) == 0


def test_scalar_and_array_calls_agree():
    t = Target.from_dict(IPU21)
    m, k, n = _grid()
    arr = t.matmul_cycles(m, k, n, "f16")
    i = np.arange(0, len(m), 97)
    assert [int(t.matmul_cycles(int(m[j]), int(k[j]), int(n[j]), "f16")) for j in i] == arr[i].tolist()


def _ceil_split(m, workers):           # rows ceil(m/W) each to the first workers
    m = np.asarray(m, np.int64)[..., None]
    q = -(-m // workers)
    return np.clip(m - np.arange(workers) * q, 0, q)


_orig = {name: getattr(amp, name) for name in dir(amp) if name.startswith("amp_")}
MUTANTS = {
    "worker split: ceil rows first": ("amp_worker_rows", _ceil_split),
    "half worker: no retention saving": ("amp_worker_cycles_half_float",
                                         lambda e, z, fa, u, c: _orig["amp_worker_cycles_half_float"](e, z, fa, u, c)
                                         + (0 if fa else 7)),
    "half worker: zeroing free": ("amp_worker_cycles_half_float",
                                  lambda e, z, fa, u, c: _orig["amp_worker_cycles_half_float"](e, False, fa, u, c)),
    "float worker: core loop 4": ("amp_worker_cycles_half_float",
                                  lambda e, z, fa, u, c: _orig["amp_worker_cycles_half_float"](e, z, fa, u, 4 if fa else c)),
    "quarter worker: no zeroing saving": ("amp_worker_cycles_quarter",
                                          lambda e, z, c: _orig["amp_worker_cycles_quarter"](e, False, c)),
    "quarter worker: no start-up": ("amp_worker_cycles_quarter",
                                    lambda e, z, c: _orig["amp_worker_cycles_quarter"](e, z, c) - 20),
    "pass: no tag cost": ("amp_pass_cycles", lambda w, W: np.asarray(w).max(-1) * W),
    "pass: the mean worker": ("amp_pass_cycles", lambda w, W: np.asarray(w).sum(-1) + 14),
    "weight load: 64-bit": ("amp_weight_load_cycles", lambda u, g, b, r: u * g * b // (r // 2)),
    "half supervisor: overhead 55": ("amp_supervisor_half_float",
                                     lambda *a: _orig["amp_supervisor_half_float"](*a) + 5),
    "half supervisor: no state retention": (
        "amp_supervisor_half_float",
        lambda gi, go, L, z, nz, W, fa: _orig["amp_supervisor_half_float"](gi, go, L, z, nz, W, True)),
    "quarter supervisor: one in-group": ("amp_supervisor_quarter",
                                         lambda gi, go, L, z, nz, W: _orig["amp_supervisor_quarter"](1, go, L, z, nz, W)),
    "output cast: none": ("amp_output_cast_cycles", lambda m, n, W, v: 0),
    "output cast: 128-bit data path": ("amp_output_cast_cycles",
                                       lambda m, n, W, v: _orig["amp_output_cast_cycles"](m, n, W, 2 * v)),
}

def _caught(disagreements, mutant, monkeypatch):
    """The oracle agrees with compiler/costs/, then disagrees once `mutant` (attr, replacement) is in."""
    assert disagreements(IPU21) == 0
    attr, fn = mutant
    set_cost_term(monkeypatch, attr, fn)
    assert disagreements(IPU21) > 0


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_each_mutated_term_is_caught(mutant, monkeypatch):
    _caught(_disagreements, MUTANTS[mutant], monkeypatch)


def test_rate_must_give_whole_cycles_per_row():
    with pytest.raises(ConfigError, match="amp_macs_per_cycle.f32"):
        Target.from_dict(dict(IPU21, amp_macs_per_cycle=dict(IPU21["amp_macs_per_cycle"], f32=7)))


# (nelem, nsrc1) -> ADD cycles, worked by hand in experiments/costs/README.md
ADD_HAND = {
    (640, 1): 653,      # residual add: BinaryOp1D, 107 halves a worker = 27 vectors
    (576, 22): 5274,    # a 23-way k-split reduction: 96 outputs a worker = 24 loops of 36 cycles
    (1792, 5): 6120,    # 6 sources: poplin's ReduceAdd, 224 loops of 8 = 37 a worker + 1 for the 2 left: 38 x
                        # (3 x 6 + 8) + 32 = 1020, x 6 (the strided reduction: 75 loops of 19, 8640)
    (2304, 3): 5952,    # 4 sources (fc1's k-split): ReduceAdd, 288 loops = 48 a worker: 48 x 20 + 32 = 992, x 6
    (1003, 8): 4776,    # 9 sources, ragged: 125 + 2 (bits 1, 2) loops = 21 a worker, the 1 left as 2 x 9 + 11
                        # once: 32 + 29 + 21 x 35 = 796, x 6 (strided: 42 loops of 22 + 15 = 939, x 6 = 5634)
    (46, 4): 306,       # 5 sources, 8 a worker = 2 loops of 18
    (16, 0): 174,       # one source (a copy through the reducer)
}


@pytest.mark.parametrize("shape", list(ADD_HAND))
def test_add_hand_transcriptions(shape):
    assert int(Target.from_dict(IPU21).add_cycles(*shape)) == ADD_HAND[shape]


def _misses(f, op: int, word0: int, fields: dict, expect) -> int:
    """Instructions of one kind with word 0 = word0 and words {index: values}: how many the
    oracle prices differently from `expect` (target.py's)."""
    n = len(next(iter(fields.values())))
    w = np.zeros((n, isa.INSTR_WORDS), np.int64)
    w[:, 0] = word0
    for i, v in fields.items():
        w[:, i] = v
    return int(np.sum(oracle.kernel_cycles(np.full(n, op), w, f) != np.asarray(expect)))


def _add_disagreements(fig: dict) -> int:
    t, f = Target.from_dict(fig), oracle._Figures(fig)
    n, k = np.meshgrid(np.arange(1, 2500, 3), np.arange(0, 40), indexing="ij")
    return _misses(f, isa.ADD, isa.ADD | isa.DTYPES["f16"] << 8, {4: k.ravel(), 5: n.ravel()},
                   t.add_cycles(n.ravel(), k.ravel()))


@pytest.mark.parametrize("target", ["ipu21", "tiny"])
def test_add_oracle_equals_target(target):
    assert _add_disagreements(yaml.safe_load((REPO / "conf" / "target" / f"{target}.yaml").read_text())) == 0


ADD_MUTANTS = {
    "binary: fast path (2 cycles a vector)": ("add_binary_cycles", lambda n, W, v: _orig_add["add_binary_cycles"](n, W, v)
                                              - W * -(-(-(-np.asarray(n) // W)) // (v // 2))),
    "binary: no supervisor": ("add_binary_cycles", lambda n, W, v: _orig_add["add_binary_cycles"](n, W, v) - 11),
    "reduce: update store (+2)": ("add_reduce_cycles", lambda n, s, W, v: _orig_add["add_reduce_cycles"](n, s, W, v)
                                  + 2 * W * -(-(-(-np.asarray(n) // W)) // (v // 2))),
    "reduce: one source fewer": ("add_reduce_cycles", lambda n, s, W, v: _orig_add["add_reduce_cycles"](n, np.asarray(s) - 1, W, v)),
    "reduce: floor split": ("add_reduce_cycles", lambda n, s, W, v: W * (15 + -(-(np.asarray(n) // W) // (v // 2))
                                                                         * (13 + np.asarray(s)))),
    "ReduceAdd: ragged tail as a whole loop": ("add_conv_reduce_cycles", lambda n, s, W, v: _orig_add[
        "add_conv_reduce_cycles"](np.asarray(n) + (-np.asarray(n)) % 8, s, W, v)),
    "ReduceAdd: 2 cycles a source a loop": ("add_conv_reduce_cycles", lambda n, s, W, v: _orig_add[
        "add_conv_reduce_cycles"](n, s, W, v) - W * np.asarray(s) * (-(-np.asarray(n) // 8) // W)),
    "ReduceAdd never chosen": ("add_conv_reduce_cycles", lambda n, s, W, v: _orig_add["add_reduce_cycles"](n, s, W, v)),
    "every ADD a reduction": ("add_cycles", lambda n, k, W, v, f32=False: _orig_add["add_reduce_cycles"](n, np.asarray(k) + 1, W, v)),
}
_orig_add = {name: cost_term(name) for name in ("add_binary_cycles", "add_reduce_cycles", "add_conv_reduce_cycles",
                                                     "add_cycles")}


@pytest.mark.parametrize("mutant", list(ADD_MUTANTS))
def test_each_mutated_add_term_is_caught(mutant, monkeypatch):
    _caught(_add_disagreements, ADD_MUTANTS[mutant], monkeypatch)


# (rows, cols) -> BIAS cycles, worked by hand in experiments/costs/README.md
BIAS_HAND = {
    (10, 64): 1039,     # 2 rows for the busiest worker, bias a multiple of 8: accumulator loop
    (4, 144): 973,      # one row each for 4 workers
    (12, 160): 2263,    # 2 rows each
    (9, 12): 475,       # bias a multiple of 4, 2 rows: the 4-lane loop
    (1, 5): 697,        # odd bias length, one row: the scalar loop (9 cycles an element)
}


@pytest.mark.parametrize("shape", list(BIAS_HAND))
def test_bias_hand_transcriptions(shape):
    assert int(Target.from_dict(IPU21).bias_cycles(*shape)) == BIAS_HAND[shape]


def _bias_disagreements(fig: dict) -> int:
    t, f = Target.from_dict(fig), oracle._Figures(fig)
    r, c = np.meshgrid(np.arange(1, 40), np.r_[np.arange(1, 300), 2044, 2048, 2049, 2052, 2056, 3000], indexing="ij")
    return _misses(f, isa.BIAS, isa.BIAS | isa.DTYPES["f16"] << 8, {4: r.ravel(), 5: c.ravel()},
                   t.bias_cycles(r.ravel(), c.ravel()))


@pytest.mark.parametrize("target", ["ipu21", "tiny"])
def test_bias_oracle_equals_target(target):
    assert _bias_disagreements(yaml.safe_load((REPO / "conf" / "target" / f"{target}.yaml").read_text())) == 0


_orig_bias = {name: cost_term(name) for name in ("bias_core_cycles", "bias_cycles")}
BIAS_MUTANTS = {
    "core: no scalar path": ("bias_core_cycles", lambda L, b, v: np.where(
        np.asarray(L) % 4 == 0, _orig_bias["bias_core_cycles"](L, b, v), _orig_bias["bias_core_cycles"](4, b, v))),
    "core: one row a pass less": ("bias_core_cycles",
                                  lambda L, b, v: _orig_bias["bias_core_cycles"](L, np.maximum(np.asarray(b) - 1, 0), v)),
    "split: 0x3 mask (PopLibs' ADD estimator as written)": (
        "bias_cycles", lambda R, L, W, v: _orig_bias["bias_cycles"](np.asarray(R) - np.where(
            (np.asarray(R) % W) >= 4, 4, 0), L, W, v)),
    "no preamble": ("bias_cycles", lambda R, L, W, v: _orig_bias["bias_cycles"](R, L, W, v) - 6 - 3 * W),
}


@pytest.mark.parametrize("mutant", list(BIAS_MUTANTS))
def test_each_mutated_bias_term_is_caught(mutant, monkeypatch):
    _caught(_bias_disagreements, BIAS_MUTANTS[mutant], monkeypatch)


# ---- GELU, SOFTMAX, ONLINE_SOFTMAX, LAYERNORM, ROWSCALE, CAST: popops / popnn vertex sums --------
# (kind, shape) -> cycles, each worked term by term in experiments/costs/README.md
VEC_HAND = {
    ("gelu", (2240,)): 5811,             # 94 vectors a worker: 9 + 6 (20 + 943 + 4)
    ("gelu", (1,)): 201,                 # no vector, one left-over half: 9 + 6 (20 + 4 + 8)
    ("softmax", (8, 730)): 23359,        # the default trial's attention rows
    ("softmax", (8, 730, True, True)): 18570,   # deferred (F_SM_DEFER): 23,359 less the UnaryOp1D INVERSE of
                                         # the 8 sums (212) and the by-row MULTIPLY over 8 x 730 (4,577)
    ("layernorm", (1, 1152)): 5923,      # one row: scalar broadcasts and element-wise gamma / beta; each row
                                         # sum in two stages: 6 pieces of 192 (48 + 29), then the 6 (1 + 29):
                                         # 6 x 107 = 642 (one worker's 6 x (288 + 29) = 1902 before: 8443);
                                         # mean and invStdDev cast to half: 2 x 295
    ("layernorm", (12, 64)): 5633,       # 2 rows a worker: the row and column broadcast vertices
    ("online_softmax", (82, 74)): 20597,
    ("rowscale", (82, 64, 1, 0)): 7817,  # v to half + multiply by row + BinaryOp1D ADD
    ("rowscale", (82, 64, 1, 1)): 8191,  # + 1 / v: UnaryOp1D INVERSE f32 (7 loops of 2 a worker)
    ("rowscale", (1, 2, 0, 1)): 596,     # one row: INVERSE, Cast1D of one element, BroadcastScalar1D
    ("cast", (82, 4, 2)): 331,           # f32 -> f16 (a row vector): 4 a loop in 2 cycles
    ("cast", (1000, 2, 1)): 541,         # f16 -> fp8: 8 a loop in 2 cycles
    ("cast", (1000, 1, 2)): 535,         # fp8 -> f16: 4 a cycle
    ("cast", (3, 2, 1)): 313,            # one worker, three left-over elements
}


REDUCE_HAND = {        # popops' two-stage row reduction (vertices.reduce_rows_cycles), by hand, ipu21 (6 workers, 4 halves)
    (1, 1152): 642,    # 6 pieces of 192: 6 x ((48 + 29) + (1 + 29)); one worker alone: 6 x (288 + 29) = 1902
    (2, 1152): 936,    # 3 pieces of 384 a row: 6 x ((96 + 29) + (0 + 2 + 29))
    (5, 1152): 2076,   # one spare worker: row 0 in 2 pieces, the others whole: 6 x ((288 + 29) + (0 + 29))
    (8, 729): 2442,    # more rows than workers: 2 a worker, one stage: 6 x (2 x 182 + 2 + 24 + 17)
    (1, 64): 270,      # too short to cut (maxSplit = min(32, 8 / 4) = 2): 6 x (16 + 29)
}


@pytest.mark.parametrize("shape", list(REDUCE_HAND))
def test_two_stage_row_reduction_by_hand(shape):
    assert int(vertices.reduce_rows_cycles(*shape, 6, 8)) == REDUCE_HAND[shape]


@pytest.mark.parametrize("key", list(VEC_HAND))
def test_vector_hand_transcriptions(key):
    kind, shape = key
    assert int(getattr(Target.from_dict(IPU21), f"{kind}_cycles")(*shape)) == VEC_HAND[key]


def _vector_disagreements(fig: dict) -> int:
    """Oracle vs target.py for every new vector kernel on a grid of shapes (and both casts)."""
    t, f = Target.from_dict(fig), oracle._Figures(fig)
    r, c = np.meshgrid(np.r_[1:40, 82, 146, 2049], np.r_[1:80, 127, 128, 730, 1152, 2044, 2048, 2052, 2053],
                       indexing="ij")
    r, c = r.ravel(), c.ravel()
    bad = 0
    cases = [(isa.LAYERNORM, (5, 6), 0, t.layernorm_cycles(r, c)), (isa.SOFTMAX, (3, 4), 0, t.softmax_cycles(r, c)),
             (isa.LAYERNORM, (5, 6), isa.F_LN_STATS, t.layernorm_cycles(r, c, isa.F_LN_STATS)),   # policy.ln_halves
             (isa.LAYERNORM, (5, 6), isa.F_LN_HALF, t.layernorm_cycles(r, c, isa.F_LN_HALF)),
             (isa.ONLINE_SOFTMAX, (4, 5), 0, t.online_softmax_cycles(r, c)),
             (isa.SOFTMAX, (3, 4, 5), 0, t.softmax_cycles(r, c, False)),     # word 5 = 1.0: no scale multiply
             (isa.SOFTMAX, (3, 4), isa.F_SM_DEFER, t.softmax_cycles(r, c, True, True)),   # policy.deferred_norm
             (isa.SOFTMAX, (3, 4, 5), isa.F_SM_DEFER, t.softmax_cycles(r, c, False, True)),
             (isa.ROWSCALE, (5, 6), 0, t.rowscale_cycles(r, c, 0, 0)),
             (isa.ROWSCALE, (5, 6), isa.F_ADD, t.rowscale_cycles(r, c, 1, 0)),
             (isa.ROWSCALE, (5, 6), isa.F_RECIP, t.rowscale_cycles(r, c, 0, 1)),
             (isa.ROWSCALE, (5, 6), isa.F_RECIP | isa.F_ADD, t.rowscale_cycles(r, c, 1, 1))]
    for op, words, flags, expect in cases:
        one = {words[2]: np.full_like(r, isa.f32_bits(1.0))} if len(words) > 2 else {}
        bad += _misses(f, op, op | isa.DTYPES["f16"] << 8 | flags << 24, {words[0]: r, words[1]: c, **one}, expect)
    n = np.arange(1, 3000)
    bad += _misses(f, isa.GELU, isa.GELU | isa.DTYPES["f16"] << 8, {3: n}, t.gelu_cycles(n))
    for src, dst in (("f16", "fp8"), ("fp8", "f16")):
        bad += _misses(f, isa.CAST, isa.CAST | isa.DTYPES[dst] << 8 | isa.DTYPES[src] << 16, {3: n},
                       t.cast_cycles(n, DTYPE_BYTES[src], DTYPE_BYTES[dst]))
    return bad


@pytest.mark.parametrize("target", ["ipu21", "tiny"])
def test_vector_oracle_equals_target(target):
    assert _vector_disagreements(yaml.safe_load((REPO / "conf" / "target" / f"{target}.yaml").read_text())) == 0


def test_cast_mixed_directions_in_one_call():
    t = Target.from_dict(IPU21)
    got = t.cast_cycles(np.array([1000, 1000, 3]), np.array([2, 1, 2]), np.array([1, 2, 1])).tolist()
    assert got == [VEC_HAND[("cast", (1000, 2, 1))], VEC_HAND[("cast", (1000, 1, 2))], VEC_HAND[("cast", (3, 2, 1))]]


_ov = {name: cost_term(name) for name in (
    "binary_op_1d_cycles", "unary_op_1d_cycles", "broadcast_scalar_1d_cycles", "broadcast_outer_by_row_cycles",
    "broadcast_inner_mul_core_half", "broadcast_inner_mul_cycles", "reduce_rows_cycles", "reduce_split",
    "nonlinearity_cycles",
    "cast_core_cycles", "cast_split", "cast_cycles", "by_row_cycles", "by_col_cycles", "softmax_cycles",
    "online_softmax_cycles", "layernorm_cycles", "rowscale_cycles", "row_value_to_half_cycles")}


def _as_written_nonlinearity(n, op, W, v):     # popnn's later `3 + swish ? 1 : 0 + ...`: the worker costs 1
    n = np.asarray(n, np.int64)
    rem = n % (v // 2)
    return 9 + W * (1 + 4 + ((rem & 2) != 0) * (2 + op) + ((rem & 1) != 0) * (3 + op))


VEC_MUTANTS = {
    "BinaryOp1D: worker overhead 25": ("binary_op_1d_cycles", lambda *a: _ov["binary_op_1d_cycles"](*a) - a[3]),
    "UnaryOp1D: exponent start-up 17": ("unary_op_1d_cycles",
                                        lambda n, e, b, W, v, x: _ov["unary_op_1d_cycles"](n, e, b, W, v, False)),
    "UnaryOp1D: no supervisor": ("unary_op_1d_cycles", lambda *a: _ov["unary_op_1d_cycles"](*a) - 20),
    "BroadcastScalar1D: no codelet overhead": ("broadcast_scalar_1d_cycles", lambda n, e, b, W, v: _ov[
        "broadcast_scalar_1d_cycles"](n, (e[0], e[1] - 1) if e[0] is None else e, b, W, v)),
    "outer by row: rows floor-split": ("broadcast_outer_by_row_cycles", lambda r, c, e, W, v: _ov[
        "broadcast_outer_by_row_cycles"](np.maximum(np.asarray(r) - np.asarray(r) % W, 1), c, e, W, v)),
    "outer by row: misaligned (25)": ("broadcast_outer_by_row_cycles", lambda r, c, e, W, v: _ov[
        "broadcast_outer_by_row_cycles"](r, c, e, W, v) + 18 * W * -(-np.asarray(r) // W)),
    "inner multiply core: never pipelined": ("broadcast_inner_mul_core_half", lambda L, b, v: _ov[
        "broadcast_inner_mul_core_half"](L, np.minimum(b, 1), v) + 2 * (np.asarray(L) // 4) * (np.asarray(b) - 1)),
    "inner multiply: no 24 a worker": ("broadcast_inner_mul_cycles",
                                       lambda r, c, W, v: _ov["broadcast_inner_mul_cycles"](r, c, W, v) - 24 * W),
    "row reduce: never in two stages": ("reduce_split", lambda r, c, W, v: (np.ones_like(np.asarray(r * c)),) * 2),
    "row reduce: pieces to maxSplit itself": ("reduce_split", lambda r, c, W, v: tuple(
        np.maximum(x, np.minimum(np.asarray(c) // 2, -(-np.asarray(c) // 8) // 4)) * (x > 1) + (x <= 1) * x
        for x in _ov["reduce_split"](r, c, W, v))),
    "row reduce: no per-output 12": ("reduce_rows_cycles", lambda r, c, W, v: _ov["reduce_rows_cycles"](r, c, W, v)
                                     - 12 * W * -(-np.asarray(r) // W)),
    "GELU: popnn's estimator as written": ("nonlinearity_cycles", _as_written_nonlinearity),
    "GELU: float op cycles": ("GELU_OP_CYCLES_HALF", 10),
    "cast core: one cycle a vector": ("cast_core_cycles", lambda n, s, d, v: _ov["cast_core_cycles"](n, 4, 4, v)),
    "cast split: even elements": ("cast_split", lambda n, W: amp.amp_worker_rows(n, W)),
    "cast: no worker entry (23)": ("cast_cycles", lambda n, s, d, W, v: _ov["cast_cycles"](n, s, d, W, v) - 23 * W),
    "by row: one row as a row broadcast": ("by_row_cycles", lambda r, c, op, W, v: _ov[
        "broadcast_outer_by_row_cycles"](r, c, vertices.PERF[(op, "f16")], W, v)),
    "by column: one row as BroadcastVectorInner": ("by_col_cycles", lambda r, c, op, W, v: np.where(
        np.asarray(r) == 1, _ov["by_col_cycles"](np.asarray(r) + 1, c, op, W, v), _ov["by_col_cycles"](r, c, op, W, v))),
    "softmax: divide as popops' DIVIDE entry a loop": ("softmax_cycles", lambda r, c, W, v, s=True, d=False: _ov[
        "softmax_cycles"](r, c, W, v, s, d) + W * -(-np.asarray(r) // W) * -(-np.asarray(c) // 4) * 20),
    "softmax: the scale multiplied at 1.0": ("softmax_cycles", lambda r, c, W, v, s=True, d=False: _ov["softmax_cycles"](
        r, c, W, v, True, d)),
    "softmax deferred: still divides": ("softmax_cycles", lambda r, c, W, v, s=True, d=False: _ov["softmax_cycles"](
        r, c, W, v, s, False)),
    "softmax deferred: the reciprocal kept": ("softmax_cycles", lambda r, c, W, v, s=True, d=False: _ov[
        "softmax_cycles"](r, c, W, v, s, d) + np.asarray(d) * _ov["unary_op_1d_cycles"](
            r, vertices.PERF[("INVERSE", "f16")], 2, W, v, False)),
    "online softmax: no state update": ("online_softmax_cycles", lambda r, c, W, v: _ov["online_softmax_cycles"](
        r, c, W, v) - 2 * _ov["binary_op_1d_cycles"](r, (None, 1), 4, W, v)),
    "layernorm: one reduction": ("layernorm_cycles", lambda r, c, W, v, f=0: _ov["layernorm_cycles"](r, c, W, v, f)
                                 - (np.asarray(f) != isa.F_LN_HALF) * _ov["reduce_rows_cycles"](r, c, W, v)),
    "rowscale: add charged always": ("rowscale_cycles", lambda r, c, a, q, W, v: _ov["rowscale_cycles"](r, c, 1, q, W, v)),
    "rowscale: no reciprocal": ("rowscale_cycles", lambda r, c, a, q, W, v: _ov["rowscale_cycles"](r, c, a, 0, W, v)),
    "rowscale: reciprocal charged always": ("rowscale_cycles",
                                            lambda r, c, a, q, W, v: _ov["rowscale_cycles"](r, c, a, 1, W, v)),
    "rowscale: reciprocal as INVERSE half": ("rowscale_cycles", lambda r, c, a, q, W, v: _ov["rowscale_cycles"](
        r, c, a, 0, W, v) + (np.asarray(q) != 0) * _ov["unary_op_1d_cycles"](r, vertices.PERF[("INVERSE", "f16")], 2, W, v,
                                                                             False)),
    "row value to half: no cast": ("row_value_to_half_cycles", lambda r, W, v: 0 * np.asarray(r)),
    "row value to half: cast from half": ("row_value_to_half_cycles", lambda r, W, v: _ov["cast_cycles"](r, 2, 2, W, v)),
    "rowscale: no cast of the vector": ("rowscale_cycles", lambda r, c, a, q, W, v: _ov["rowscale_cycles"](
        r, c, a, q, W, v) - _ov["row_value_to_half_cycles"](r, W, v)),
    "online softmax: no cast of the max": ("online_softmax_cycles", lambda r, c, W, v: _ov["online_softmax_cycles"](
        r, c, W, v) - _ov["row_value_to_half_cycles"](r, W, v)),
    "layernorm: one cast of the statistics": ("layernorm_cycles", lambda r, c, W, v, f=0: _ov["layernorm_cycles"](
        r, c, W, v, f) - (np.asarray(f) != isa.F_LN_STATS) * _ov["row_value_to_half_cycles"](r, W, v)),
    "PERF: INVERSE f32 as a vector entry": ("PERF", {**vertices.PERF, ("INVERSE", "f32"): (None, 6)}),
    "PERF: EXPONENT half 2 cycles a vector": ("PERF", {**vertices.PERF, ("EXPONENT", "f16"): (None, 2)}),
    "PERF: VARIANCE_TO_INV_STD_DEV half entry": ("PERF", {**vertices.PERF, ("VARIANCE_TO_INV_STD_DEV", "f32"): (4, 24)}),
}


@pytest.mark.parametrize("mutant", list(VEC_MUTANTS))
def test_each_mutated_vector_term_is_caught(mutant, monkeypatch):
    _caught(_vector_disagreements, VEC_MUTANTS[mutant], monkeypatch)

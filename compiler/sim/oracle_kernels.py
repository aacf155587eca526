"""The oracle's kernel costs: each kernel instruction's cycles re-derived from its
instruction words and the raw figures of the target dict, as compiler/sim/oracle.py's
docstring states the machine (docs/architecture.md §2). Like the oracle it imports neither
target.py nor compiler/costs/ (tests/test_imports.py): a wrong cost there shows up as a
disagreement with these (tests/sim/test_oracle.py, tests/sim/test_costs.py)."""
from __future__ import annotations

import numpy as np

from .. import isa

BYTES = {isa.DTYPES["f16"]: 2, isa.DTYPES["fp8"]: 1, isa.DTYPES["f32"]: 4}
DNAME = {v: k for k, v in isa.DTYPES.items()}
# instruction words a cost reads, per opcode (1-based argument words; word 0 always)
COST_WORDS = {isa.MATMUL: (4, 5, 6), isa.ADD: (4, 5), isa.COPY: (3, 4), isa.GELU: (3,),
              isa.LAYERNORM: (5, 6), isa.SOFTMAX: (3, 4, 5), isa.CAST: (3,), isa.ONLINE_SOFTMAX: (4, 5),
              isa.ROWSCALE: (5, 6), isa.BIAS: (4, 5), isa.MERGE: (4, 5, 6), isa.EXCH: (1, 2, 3),
              isa.HOST: (1, 2, 3)}
ENTRY_COST_WORDS = (0, 2, 3)     # peer tile, row bytes, rows
SCALE_WORD = {isa.MATMUL: 7, isa.CAST: 4}   # the scale word (f32 bits, or a table address)


def _up(a, b):
    return -(-np.asarray(a, np.int64) // b)


class _Figures:
    def __init__(self, fig: dict):
        self.f = fig

    def __getattr__(self, k):
        return self.f[k]


def _worker_time(rows, name, first, row_cycles, units):
    """One worker context's cycles in one AMP pass over `rows` output rows
    (PerformanceEstimation.hpp, the 1x1 inner-loop estimates; `first`: the pass that
    zeroes the partials). int64[n, W]."""
    r = rows
    if name == "fp8":                                # ...InnerLoopCycleEstimateQuarter
        save = 5 if first else 0
        by_rows = np.where(r >= 3, 29 - save + row_cycles * (r - 3),
                           np.choose(np.minimum(r, 2), [0, 17 - save, 22 - save]))
        return 20 + by_rows
    if name == "f32":                                # ...HalfFloat, float activations
        zero = 8 if units == 16 else 4              # cycles to zero a row's partials
        z = 1 if first else 0
        big = 46 + z * (2 + zero * r) + row_cycles * (r - 3)
        return np.where(r >= 3, big, np.choose(np.minimum(r, 2), [24, 47 + z * (2 + zero), 46 + z * (2 + 2 * zero)]))
    # half activations, float partials: the path PopLibs shares with 16 half-partial units,
    # one cycle shorter on the zeroing pass, minus 7 cycles of retained worker state
    nz = 0 if first else 1
    big = 37 + nz + row_cycles * (r - 3)
    return np.where(r >= 3, big, np.choose(np.minimum(r, 2), [21 + nz, 32 + nz, 41 + nz])) - 7


def mm_cycles(m, k, n, name, f: _Figures, seg=None, f32_out=None) -> np.ndarray:
    """The ConvPartial1x1Out estimate (module docstring) of MATMULs m x k x n run as `name`;
    seg (int64[n, 2], where > 0): the output- and input-channel groups a segmented b
    (F_SEG_B) holds, each segment its own groups (the vertex's weights are one pointer
    per group); f32_out (bool[n], where true): F_F32_OUT, a k-split's f32 partials, no cast
    (a reduction reads them and writes half)."""
    m, k, n = (np.asarray(x, np.int64) for x in (m, k, n))
    W = f.workers
    gi, go, rate = f.amp_in_group[name], f.amp_out_group[name], f.amp_macs_per_cycle[name]
    row_cycles = gi * go // rate
    k_groups, n_groups = _up(k, gi), _up(n, go)
    if seg is not None:
        n_groups = np.where(seg[:, 0] > 0, seg[:, 0], n_groups)
        k_groups = np.where(seg[:, 1] > 0, seg[:, 1], k_groups)
    cut = (m[:, None] * np.arange(W + 1)) // W       # partitionConvPartialByWorker
    rows = np.diff(cut, axis=1)
    passes = []
    for first in (True, False):
        t = _worker_time(rows, name, first, row_cycles, go)
        passes.append(np.maximum(W * t.max(1), W * t.min(1) + 14))
    zero_pass, pass_ = passes
    load = go * gi * BYTES[isa.DTYPES[name]] // f.amp_weight_load_bytes_per_cycle
    if name == "fp8":                                # ...OuterLoopCycleEstimateQuarter
        per_n = (6 * W + 10) + (20 * W + 11 + load + zero_pass) + (k_groups - 1) * (17 * W + 6 + load + pass_)
        return 46 + 2 * W + 9 + n_groups * per_n
    # ...OuterLoopCycleEstimateHalfFloat, float partials, one conv group, one pass per n group
    kept = 0 if name == "f32" else W * (7 + 3 * (k_groups - 1))
    sup = 50 + kept + 13 + 11 + n_groups * (25 + load + zero_pass) \
        + (k_groups - 1) * (15 + n_groups * (25 + load + pass_))
    share = _up(m * n, W)                            # ConvPlan.cpp estimateCastCycles
    cast = W * (26 + np.maximum(_up(share, f.vector_bytes_per_cycle // 4), _up(share, f.vector_bytes_per_cycle // 2)))
    return sup + np.where(np.zeros(len(m), bool) if f32_out is None else f32_out, 0, cast)


def add_f32_cycles(nelem, nsrc1, f: _Figures) -> np.ndarray:
    """ADD of f32 src0 and nsrc1 f32 partials to f16 (dtype2 f32): the cheaper of poplin's
    ReduceAdd<half, float> (4-float accumulator loops, a loop 2 loads + 1 pointer a source
    + 6, + 32, ragged left-over 2·sources + 13 once) and popops' strided reduction of float
    partials (2 outputs a loop: 3 + 3 + 2 + 3 + sources - 1; 15 set-up), x W."""
    W = f.workers
    n, S = np.asarray(nelem, np.int64), np.asarray(nsrc1, np.int64) + 1
    floats = f.vector_bytes_per_cycle // 4                        # floats a 64-bit load
    lp = n // 4 + (n & 1) + ((n >> 1) & 1)
    tail = (n % 4 != 0) & (lp % W != 0)
    whole = lp // W + ((lp % W != 0) & ~tail)
    ra = W * (32 + np.where(tail, 2 * S + 13, 0) + ((4 // floats + 1) * S + 6) * whole)
    strided = W * (15 + _up(_up(n, W), floats) * (10 + S))
    return np.minimum(ra, strided)


def add_cycles(nelem, nsrc1, f: _Figures) -> np.ndarray:
    """ADD of src0 and nsrc1 partials (f16): two sources as popops' BinaryOp1D ADD, otherwise
    its strided reduction, every worker taking ceil(nelem / W) elements (module docstring)."""
    W, lanes = f.workers, f.vector_bytes_per_cycle // 2          # halves per 64-bit vector
    vecs = _up(_up(nelem, W), lanes)
    two = W * (26 + 3 * vecs) + 11                    # 26 + (1 cycle + 2 load/store) a vector; supervisor 11
    k = np.asarray(nsrc1, np.int64)
    many = W * (15 + vecs * (14 + k))                 # 15 set-up; 3 + 8 + 3 + (sources - 1) a vector
    # 3+ sources may run poplin's ReduceAdd instead: 16-byte accumulator loops (8 halves), the
    # low bits of a ragged count one loop each; per worker loops // W, the rest one loop more each
    # (whole) or 2·sources + 11 once (ragged); 3·sources + 8 a loop, + 32, × W
    n = np.asarray(nelem, np.int64)
    a = 4 * lanes // 2
    bits = sum((n >> b) & 1 for b in range(a.bit_length() - 1))
    lp = n // a + bits
    tail = (n % a != 0) & (lp % W != 0)
    ra = W * (32 + np.where(tail, 2 * (k + 1) + 11, 0) + (3 * (k + 1) + 8) * (lp // W + ((lp % W != 0) & ~tail)))
    return np.where(k == 1, two, np.where(k >= 2, np.minimum(many, ra), many))


def bias_cycles(rows, cols, f: _Figures) -> np.ndarray:
    """BIAS as popops' BroadcastVectorInner1D ADD (not in place), half: the rows are blocks
    shared by the W workers, the busiest taking ceil(rows / W); vectorInnerAddCoreCycles_half
    picks its loop by the bias length L and that block count b."""
    W, lanes = f.workers, f.vector_bytes_per_cycle // 2
    L = np.asarray(cols, np.int64)
    b = _up(rows, W)
    per_elem = 6 + L * (5 + 9 * b)                   # the scalar loop: 9 cycles an element a row
    pairs = L // (2 * lanes)                         # multiple of 8: two vectors a pass
    by8 = np.where(b == 1, 6 + 7 * pairs, 7 + pairs * (13 + 2 * b))
    quads = L // lanes                               # multiple of 4, 2+ rows
    by4 = 6 + quads * (11 + 2 * (b // 2) + b % 2)
    core = np.where(b == 0, 1, np.where(L > 2048, 3 + per_elem, np.where(
        L % 8 == 0, 5 + by8, np.where(b < 2, 7 + per_elem, np.where(L % 4 == 0, 9 + by4, 9 + per_elem)))))
    odd = np.where(L % 2 == 1, 7 + (np.asarray(rows, np.int64) < W), 0)
    return 13 + W * (19 + odd + core) + 6 + 3 * W


# ---- the other vector kernels, as the popops / popnn vertices their counterparts run ---------------
# Re-read for this file from graphcore/poplibs (popopsCycleEstimators.cpp, popops
# PerformanceEstimation.cpp, reduction/CycleEstimationFunctions.cpp, popnnCycleEstimators.cpp,
# the ExprOpUtil perf tables); W worker contexts, 64-bit vectors (4 halves, 2 floats).

def _per_w(n, W):
    return _up(n, W)


def _bin1d(n, W, per_loop, lanes):                    # BinaryOp1D: 26 a worker; supervisor 11
    return W * (26 + _up(_per_w(n, W), lanes) * per_loop) + 11


def _un1d(n, W, per_loop, grain, base):               # UnaryOp1D: base 33 (exp) / 17; + 9 + 11
    return W * (base + _up(_per_w(n, W), grain) * per_loop) + 20


def _scalar1d(n, W, per_loop, grain):                 # BroadcastScalar1D not in place: 20 a worker
    return W * (20 + _up(_per_w(n, W), grain) * per_loop) + 11


def _rows_op(r, c, W, lanes):                         # one value per row, 1-cycle op (+1 overhead)
    r, c = np.asarray(r, np.int64), np.asarray(c, np.int64)
    outer = W * (15 + _up(r, W) * (7 + 2 * _up(c, lanes))) + 11      # BroadcastVectorOuterByRow1D
    return np.where(r == 1, _scalar1d(c, W, 2, lanes), outer)        # a lone row: a scalar broadcast


def _reduce_rows(r, c, W, lanes):                     # ContinuousReduce, ceil(r/W) outputs a worker
    r, c = np.broadcast_arrays(np.asarray(r, np.int64), np.asarray(c, np.int64))
    o = _up(r, W)
    single = W * (o * (c // lanes) + 12 * o + 17 + 2 * (c & 1))
    # fewer rows than workers: popops cuts each row into pieces for the idle workers (round robin,
    # fewer than min(c / 2, ceil(c / 2·lanes) / 4) pieces), reduces the pieces, then each row's pieces
    limit = np.minimum(c // 2, _up(c, 2 * lanes) // 4) - 1
    spare = np.clip(W - r, 0, None)
    lo = np.clip(1 + spare // np.maximum(r, 1), None, np.maximum(limit, 1))
    hi = np.clip(1 + _up(spare, np.maximum(r, 1)), None, np.maximum(limit, 1))
    worker = lambda p: p // lanes + 2 * (p & 1) + 29          # one output of p partials
    stage1, stage2 = np.zeros_like(c), np.zeros_like(c)
    for cuts in (lo, hi):            # a row's pieces: as even as whole partials allow, at least 2 each
        n = np.where((cuts > 1) & (c > 3), np.minimum(_up(c, _up(c, cuts)), c // 2), 1)
        stage1 = np.maximum(stage1, np.maximum(worker(c // n), worker(_up(c, n))))
        stage2 = np.maximum(stage2, np.where(n > 1, worker(n), 0))
    return np.where(hi > 1, W * (stage1 + stage2), single)


def _gamma(r, c, W, lanes):                           # x * gamma: BroadcastVectorInner1D MULTIPLY
    r, L = np.asarray(r, np.int64), np.asarray(c, np.int64)
    b = r // W + (r % W > 0)
    groups = L // lanes
    core = np.where(L % 4 > 0, 3 + 5 + L * (5 + 9 * b),                       # scalar loop
                    np.where(L > 2044, 7 + 4 + groups * (7 + 2 * b),      # 2 cycles a block
                             np.where(b < 2, 9 + 4 + groups * (7 + 2 * b),
                                      9 + 4 + groups * np.where(b == 1, 7, 9 + b))))   # pipelined
    odd = (L % 2) * (7 + (r < W))
    inner = 13 + 24 * W + W * (21 + odd + core)
    return np.where(r == 1, _bin1d(r * L, W, 3, lanes), inner)           # a lone row: element-wise


def _gelu(n, W, lanes, op=5):                         # NonLinearitySupervisor, GELU's placeholder 5
    n = np.asarray(n, np.int64)
    v = _up(n // lanes, W)
    body = np.where(v == 0, 0, 3 + 2 * op * v)        # 2 + op + 2op(v-1) + 1 + op
    rem = n % lanes
    return 9 + W * (24 + body + np.where(rem >= 2, 2 + op, 0) + np.where(rem % 2 == 1, 3 + op, 0))


def _cast_one(e, sb, db, vb):                         # castWorkerCycles, aux-pipeline float path
    ld, st = vb // sb, vb // db
    width = min(ld * 2, st)
    per = max(width // min(width, ld), width // min(width, st))
    r = e % width
    checks, bit = 0, 1
    while bit < width:
        checks = checks + 1 + 2 * ((r & bit) > 0)
        bit *= 2
    return 19 + per * (e // width) + checks


def _cast(n, sb, db, W, vb):                          # Cast1D: 19 + W x (max worker + 23)
    n = np.asarray(n, np.int64)
    g = _up(n, 4)                                     # 4-element grains (workerElems, ...)
    big, count = 4 * _up(g, W), np.where(g % W == 0, W, g % W)
    small = big - 4
    delta = 4 * g - n
    last_is_big = np.where(g >= W, count == W, True)  # the worker holding the tail
    cand = [np.where(last_is_big, big - delta, small - delta),
            np.where(last_is_big & (count == 1), -1, big),
            np.where((W - count - (~last_is_big)) > 0, small, -1)]
    worst = np.max([np.where(c_ < 0, 0, _cast_one(np.maximum(c_, 0), sb, db, vb)) for c_ in cand], axis=0)
    return 19 + W * (worst + 23)


def vector_cycles(op, r, c, add, f: _Figures, recip=0) -> np.ndarray:
    """GELU (r = nelem), SOFTMAX, ONLINE_SOFTMAX, LAYERNORM, ROWSCALE of r x c f16. An f32 value
    per row applied to f16 data is first cast to f16 (`to_half`): popops' broadcast vertices take
    one type for both operands."""
    W, lanes, fl = f.workers, f.vector_bytes_per_cycle // 2, f.vector_bytes_per_cycle // 4
    r, c = np.asarray(r, np.int64), np.asarray(c, np.int64)
    n = r * c
    if op == isa.GELU:
        return _gelu(r, W, lanes)
    to_half = _cast(r, 4, 2, W, f.vector_bytes_per_cycle)
    if op == isa.ROWSCALE:   # (1 / v: UnaryOp1D INVERSE float {6 cycles a loop of 2}), v to f16, x v, (+ src1)
        inv = np.where(np.asarray(recip) != 0, _un1d(r, W, 6, 2, 17), 0)
        return inv + to_half + _rows_op(r, c, W, lanes) + np.where(np.asarray(add) != 0, _bin1d(n, W, 3, lanes), 0)
    scale = _scalar1d(n, W, 2, lanes)
    if op == isa.SOFTMAX:     # scale (unless its word is 1.0: `add` carries that), max, subtract, exp, sum, 1/sum, multiply;
        # F_SM_DEFER (`recip` carries it): stops at the sums (no 1/sum, no multiply)
        last = np.where(np.asarray(recip) != 0, 0, _rows_op(r, c, W, lanes) + _un1d(r, W, 15, 4, 17))
        return (np.where(np.asarray(add) != 0, scale, 0) + 2 * _reduce_rows(r, c, W, lanes) + _rows_op(r, c, W, lanes)
                + _un1d(n, W, 4, 4, 33) + last)
    if op == isa.ONLINE_SOFTMAX:   # + f32 state: max, subtract, exp, multiply, add
        state = _bin1d(r, W, 4, 2) + 3 * _bin1d(r, W, 3, fl) + _un1d(r, W, 6, 2, 33)
        return (scale + 2 * _reduce_rows(r, c, W, lanes) + to_half + _rows_op(r, c, W, lanes)
                + _un1d(n, W, 4, 4, 33) + state)
    # LAYERNORM: sums of x and x^2, mean^2 and the subtraction (f32), var -> invStdDev, mean and
    # invStdDev to f16, whiten, gamma, beta. `add` carries its flags: F_LN_STATS the sums alone;
    # F_LN_HALF the rest, after adding the two halves' sums (2 r floats, a binary f32 ADD)
    beta = np.where(r == 1, _bin1d(n, W, 3, lanes), bias_cycles(r, c, f))
    sums = 2 * _reduce_rows(r, c, W, lanes)
    rest = (2 * _bin1d(r, W, 3, fl) + _scalar1d(r, W, 12, 2) + 2 * to_half + 2 * _rows_op(r, c, W, lanes)
            + _gamma(r, c, W, lanes) + beta)
    flags = np.asarray(add, np.int64)
    return np.where(flags == isa.F_LN_STATS, sums,
                    np.where(flags == isa.F_LN_HALF, _bin1d(2 * r, W, 3, fl) + rest, sums + rest))


def merge_cycles(r, c, s, f: _Figures) -> np.ndarray:
    """MERGE of s splits' [r, c] partials and f32 [2, s, r] statistics (module docstring)."""
    W, lanes, fl, V = f.workers, f.vector_bytes_per_cycle // 2, f.vector_bytes_per_cycle // 4, f.vector_bytes_per_cycle
    r, c, s = (np.asarray(x, np.int64) for x in (r, c, s))
    n = s * r

    def halving(per_loop, grain):                    # BinaryOp1D over floor(k/2) x r while k splits live
        k, tot = s.copy(), np.zeros_like(s)
        while (k > 1).any():
            h = k // 2
            tot += np.where(h > 0, _bin1d(h * r, W, per_loop, grain), 0)
            k -= h
        return tot
    stats = (halving(4, 2) + f.kernel_overhead_cycles + _up(4 * n, f.copy_bytes_per_cycle)   # max, broadcast copy
             + _bin1d(n, W, 3, fl) + _un1d(n, W, 6, 2, 33) + _bin1d(n, W, 3, fl) + halving(3, fl))
    outs = (_cast(n, 4, 2, W, V) + _rows_op(n, c, W, lanes) + add_cycles(r * c, s - 1, f)
            + vector_cycles(isa.ROWSCALE, r, c, 0, f, 1))
    return stats + outs


def amp_type(w) -> np.ndarray:
    """The dtype code a MATMUL runs as (w int64[n, INSTR_WORDS]): the slower operand's."""
    dt, dt2 = (w[:, 0] >> 8) & 0xFF, (w[:, 0] >> 16) & 0xFF
    return dt, np.where(dt2 == 0, dt, dt2)


def kernel_cycles(op, w, f: _Figures, seg_groups=None) -> np.ndarray:
    """Cycles of kernel instructions: op int64[n], w int64[n, INSTR_WORDS]; seg_groups
    int64[n, 2]: a segmented MATMUL's output- and input-channel groups (0: from n, k)."""
    K, V = f.kernel_overhead_cycles, f.vector_bytes_per_cycle
    out = np.zeros(len(op), np.int64)
    dt, dt2, fl = (w[:, 0] >> 8) & 0xFF, (w[:, 0] >> 16) & 0xFF, (w[:, 0] >> 24) & 0xFF

    def at(code):
        return np.flatnonzero(op == code)

    i = at(isa.MATMUL)
    if len(i):
        a = np.where(dt2[i] == 0, dt[i], dt2[i])
        b = dt[i]
        rate = {c: f.amp_macs_per_cycle[DNAME[c]] for c in BYTES}
        ra, rb = np.vectorize(rate.get)(a), np.vectorize(rate.get)(b)
        d = np.where(ra < rb, a, b)                      # the slower operand's type
        for c in np.unique(d):
            s = i[d == c]
            out[s] = mm_cycles(w[s, 4], w[s, 5], w[s, 6], DNAME[int(c)], f,
                               None if seg_groups is None else seg_groups[s], (fl[s] & isa.F_F32_OUT) != 0)
    i = at(isa.COPY)
    out[i] = K + _up(w[i, 3] * w[i, 4], f.copy_bytes_per_cycle)
    i = at(isa.ADD)
    f32 = dt2[i] == isa.DTYPES["f32"]
    out[i] = np.where(f32, add_f32_cycles(w[i, 5], w[i, 4], f), add_cycles(w[i, 5], w[i, 4], f))
    i = at(isa.GELU)
    out[i] = vector_cycles(isa.GELU, w[i, 3], 1, 0, f)
    i = at(isa.BIAS)
    out[i] = bias_cycles(w[i, 4], w[i, 5], f)
    i = at(isa.CAST)
    for s_, d_ in set(zip(dt2[i].tolist(), dt[i].tolist())):     # (source, destination) types
        j = i[(dt2[i] == s_) & (dt[i] == d_)]
        out[j] = _cast(w[j, 3], BYTES[s_], BYTES[d_], f.workers, V)
    i = at(isa.LAYERNORM)
    out[i] = vector_cycles(isa.LAYERNORM, w[i, 5], w[i, 6], fl[i], f)
    for code, (a, b) in ((isa.ONLINE_SOFTMAX, (4, 5)), (isa.ROWSCALE, (5, 6))):
        i = at(code)
        out[i] = vector_cycles(code, w[i, a], w[i, b], (fl[i] & isa.F_ADD) != 0, f,
                               (fl[i] & isa.F_RECIP) != 0 if code == isa.ROWSCALE else 0)
    i = at(isa.MERGE)
    out[i] = merge_cycles(w[i, 4], w[i, 5], w[i, 6], f)
    i = at(isa.SOFTMAX)                 # the scale word: 1.0 (0x3F800000) needs no multiply
    out[i] = vector_cycles(isa.SOFTMAX, w[i, 3], w[i, 4], (w[i, 5] & 0xFFFFFFFF) != 0x3F800000, f,
                           (w[i, 0] >> 24) & isa.F_SM_DEFER)
    return out

"""An independent cycle oracle: every superstep's cycles re-derived from the lowered
program and the machine table of docs/architecture.md §2, sharing no code with the cost model.

    step_cycles(program) -> int64[executed supersteps]      (sync included)
    host_cycles(program) -> int                             (host in + out)

It reads only the Program: instruction words decoded from the code bytes with the
encoding constants of compiler/isa.py, exchange entries from the encoded table bytes,
the REPEAT relocation table, the host stream descriptors, and the raw figures of the
target dict the program carries (the YAML). It imports neither target.py's cost
functions nor expand's analysis nor the simulator's kernels, and executes nothing: a
wrong cost anywhere in those shows up as a disagreement (tests/sim/test_oracle.py).

The machine, as docs/architecture.md §2 states it:
- a superstep is every tile running to its SYNC; it lasts as long as its slowest tile,
  plus one sync (`sync_cycles`). A tile's time is the sum of its kernels, or, if it
  takes part in the step's exchange (EXCH), the whole exchange phase;
- an exchange phase: each tile sends at most, and receives at most,
  `exchange_bytes_per_cycle`, whatever its neighbours do; the phase lasts as long as
  its busiest sender or receiver plus `exchange_phase_cycles`;
- a MATMUL costs what PopLibs estimates for the AMP vertex Poplar would run for it
  (poplinCycleEstimators.cpp ConvPartial1x1Out -> PerformanceEstimation.hpp
  getConvPartial1x1SupervisorCycleEstimate; read again for this file, see mm_cycles): the
  type is the slower operand's (`amp_macs_per_cycle`); k in groups of `amp_in_group`, n in
  groups of `amp_out_group` (= the conv units; ragged groups pay whole); the m rows split
  over the `workers` as ConvUtil.cpp's partitionConvPartialByWorker does (worker w: rows
  floor(w m / W) .. floor((w+1) m / W)); each pass costs W x its slowest worker (or
  W x its fastest + 14), a worker's time by its rows (core loop of in x out / rate cycles
  a row); passes load weights (out_group x in_group x element bytes at
  `amp_weight_load_bytes_per_cycle`); the first k group zeroes the partials; supervisor
  loop overheads per k and n group; half/float activations accumulate f32 partials and
  pay a separate f32 -> f16 cast (ConvPlan.cpp estimateCastCycles, with the 64-bit
  `vector_bytes_per_cycle`); FP8 x FP8 runs the QUARTER vertex (half partials, no cast);
- an ADD of two f16 sources costs what popops estimates for BinaryOp1D ADD (per worker 26 +
  3 cycles per 4-half vector of its ceil(n/W) elements, x W, + 11); of one or three and more
  sources, its strided reduction (getCyclesEstimateForStridedReduce: per worker 15 + per vector
  of 4 outputs 13 + sources, x W), or with three or more, poplin's ReduceAdd where cheaper
  (getReduceCycleEstimate: 32 + per 8-output loop 3 x sources + 8, x W);
- a BIAS costs popops' BroadcastVectorInner1D ADD estimate (vectorInnerMultiVertexAddCycles
  + its preamble; see bias_cycles);
- GELU, SOFTMAX, ONLINE_SOFTMAX, LAYERNORM, ROWSCALE and CAST cost the sum of the popops /
  popnn vertex estimates their PopLibs counterparts run (see vector_cycles and _cast): popnn's
  GELU non-linearity; softmax = scale (none at a scale word of 1.0), row max, subtract, exp,
  row sum, reciprocal, multiply;
  the online softmax adds the f32 state updates (a row reduction with fewer rows than workers
  runs in popops' two stages: each row cut for the idle workers, then the pieces reduced);
  layer norm = two row reductions, the f32 statistics, whitening, gamma and beta; ROWSCALE a
  multiply by row (+ an ADD; with F_RECIP the f32 reciprocal of the rows first); CAST popops'
  Cast1D. A single row's per-row value is a scalar broadcast, its gamma / beta element-wise;
  an f32 per-row value (ROWSCALE's vector, the online max, LayerNorm's mean and invStdDev) is
  cast to f16 (Cast1D) before the f16 vertex that applies it;
- a MERGE (split-key attention's merge of s partial states of r rows x c) costs the popops
  vertices a Poplar program would run for it (see merge_cycles): max, subtract, exp,
  multiply and sum of the f32 statistics (halving trees of BinaryOp1D for the two
  reductions over the splits, a copy broadcasting the max), c to f16, a by-row multiply
  of the s x r rows, the reduction of the s partial outputs (as ADD's), 1/L applied as ROWSCALE;
- a COPY costs `kernel_overhead_cycles` plus its bytes at `copy_bytes_per_cycle` (Poplar's
  own copy: assumed);
- REPEAT costs nothing: its body runs `count` times (relocation moves addresses; the
  oracle re-derives an iteration's costs only if a relocated word is one a cost reads);
- a MATMUL or CAST flagged F_SCALE_TABLE reads its scale from an f32 of its own tile's
  table instead of the instruction word: no cost of its own, but the address, in every
  iteration the relocation table gives it, must lie in that table (checked here);
- host streams move at `host_bytes_per_cycle`, in and out each rounded up.
"""
from __future__ import annotations

import numpy as np

from .. import isa

BYTES = {isa.DTYPES["f16"]: 2, isa.DTYPES["fp8"]: 1, isa.DTYPES["f32"]: 4}
DNAME = {v: k for k, v in isa.DTYPES.items()}
# instruction words a cost reads, per opcode (1-based argument words; word 0 always)
COST_WORDS = {isa.MATMUL: (4, 5, 6), isa.ADD: (4, 5), isa.COPY: (3, 4), isa.GELU: (3,),
              isa.LAYERNORM: (5, 6), isa.SOFTMAX: (3, 4, 5), isa.CAST: (3,), isa.ONLINE_SOFTMAX: (4, 5),
              isa.ROWSCALE: (5, 6), isa.BIAS: (4, 5), isa.MERGE: (4, 5, 6), isa.EXCH: (1, 2, 3)}
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


def mm_cycles(m, k, n, name, f: _Figures) -> np.ndarray:
    """The ConvPartial1x1Out estimate (module docstring) of MATMULs m x k x n run as `name`."""
    m, k, n = (np.asarray(x, np.int64) for x in (m, k, n))
    W = f.workers
    gi, go, rate = f.amp_in_group[name], f.amp_out_group[name], f.amp_macs_per_cycle[name]
    row_cycles = gi * go // rate
    k_groups, n_groups = _up(k, gi), _up(n, go)
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
    return sup + cast


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
    if op == isa.SOFTMAX:     # scale (unless its word is 1.0: `add` carries that), max, subtract, exp, sum, 1/sum, multiply
        return (np.where(np.asarray(add) != 0, scale, 0) + 2 * _reduce_rows(r, c, W, lanes) + 2 * _rows_op(r, c, W, lanes)
                + _un1d(n, W, 4, 4, 33) + _un1d(r, W, 15, 4, 17))
    if op == isa.ONLINE_SOFTMAX:   # + f32 state: max, subtract, exp, multiply, add
        state = _bin1d(r, W, 4, 2) + 3 * _bin1d(r, W, 3, fl) + _un1d(r, W, 6, 2, 33)
        return (scale + 2 * _reduce_rows(r, c, W, lanes) + to_half + _rows_op(r, c, W, lanes)
                + _un1d(n, W, 4, 4, 33) + state)
    # LAYERNORM: sums of x and x^2, mean^2 and the subtraction (f32), var -> invStdDev, mean and
    # invStdDev to f16, whiten, gamma, beta
    beta = np.where(r == 1, _bin1d(n, W, 3, lanes), bias_cycles(r, c, f))
    return (2 * _reduce_rows(r, c, W, lanes) + 2 * _bin1d(r, W, 3, fl) + _scalar1d(r, W, 12, 2)
            + 2 * to_half + 2 * _rows_op(r, c, W, lanes) + _gamma(r, c, W, lanes) + beta)


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


def kernel_cycles(op, w, f: _Figures) -> np.ndarray:
    """Cycles of kernel instructions: op int64[n], w int64[n, INSTR_WORDS]."""
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
            out[s] = mm_cycles(w[s, 4], w[s, 5], w[s, 6], DNAME[int(c)], f)
    i = at(isa.COPY)
    out[i] = K + _up(w[i, 3] * w[i, 4], f.copy_bytes_per_cycle)
    i = at(isa.ADD)
    out[i] = add_cycles(w[i, 5], w[i, 4], f)
    i = at(isa.GELU)
    out[i] = vector_cycles(isa.GELU, w[i, 3], 1, 0, f)
    i = at(isa.BIAS)
    out[i] = bias_cycles(w[i, 4], w[i, 5], f)
    i = at(isa.CAST)
    for s_, d_ in set(zip(dt2[i].tolist(), dt[i].tolist())):     # (source, destination) types
        j = i[(dt2[i] == s_) & (dt[i] == d_)]
        out[j] = _cast(w[j, 3], BYTES[s_], BYTES[d_], f.workers, V)
    for code, (a, b) in ((isa.LAYERNORM, (5, 6)), (isa.ONLINE_SOFTMAX, (4, 5)), (isa.ROWSCALE, (5, 6))):
        i = at(code)
        out[i] = vector_cycles(code, w[i, a], w[i, b], (fl[i] & isa.F_ADD) != 0, f,
                               (fl[i] & isa.F_RECIP) != 0 if code == isa.ROWSCALE else 0)
    i = at(isa.MERGE)
    out[i] = merge_cycles(w[i, 4], w[i, 5], w[i, 6], f)
    i = at(isa.SOFTMAX)                 # the scale word: 1.0 (0x3F800000) needs no multiply
    out[i] = vector_cycles(isa.SOFTMAX, w[i, 3], w[i, 4], (w[i, 5] & 0xFFFFFFFF) != 0x3F800000, f)
    return out


class Oracle:
    def __init__(self, program):
        p = program
        self.p, self.f = p, _Figures(dict(p.target))
        self.T = T = len(p.code_addr)
        code_off = np.asarray(p.code_off, np.int64)
        self.words = np.frombuffer(np.ascontiguousarray(p.code, np.uint8).tobytes(), "<u4").astype(np.int64)
        self.words = self.words.reshape(-1, isa.INSTR_WORDS)
        n = np.diff(code_off) // isa.INSTR_BYTES
        self.tile = np.repeat(np.arange(T), n)
        self.pc = np.arange(len(self.tile)) - np.repeat(code_off[:-1] // isa.INSTR_BYTES, n)
        op = self.words[:, 0] & 0xFF
        self.op = op
        # static superstep of each instruction (a REPEAT body counted once)
        sync = (op == isa.SYNC).astype(np.int64)
        before = np.cumsum(sync) - sync
        first = np.repeat(np.cumsum(np.r_[0, n[:-1]]), n)
        self.step = before - before[first]          # SYNCs before it on its own tile
        nsync = np.bincount(self.tile, sync, T).astype(np.int64)
        if len(set(nsync.tolist())) > 1:
            raise ValueError(f"tiles disagree on the number of supersteps: {sorted(set(nsync.tolist()))}")
        self.nsync = int(nsync[0]) if T else 0
        tab = np.ascontiguousarray(p.table, np.uint8).tobytes()
        self.table = np.frombuffer(tab[:len(tab) // 4 * 4], "<u4").astype(np.int64)
        self.table_off = np.asarray(p.table_off, np.int64)
        self.table_addr = np.asarray(p.table_addr, np.int64)
        self.code_addr = np.asarray(p.code_addr, np.int64)

    def table_index(self, tile, addr):
        """Global table-word index of absolute address `addr` on `tile`."""
        off = self.table_off[tile] + (addr - self.table_addr[tile])
        if np.any(off % 4) or np.any(addr < self.table_addr[tile]) or \
                np.any(addr - self.table_addr[tile] >= np.diff(self.table_off)[tile]):
            raise ValueError("a table address lies outside its tile's exchange table")
        return off // 4

    # ---- one evaluation of the whole program's static supersteps ----------------
    def costs(self, words, table):
        """Per static superstep and tile: (cycles int64[S, T]). Uses `words`
        (instruction words) and `table` (table words) as given (relocated or not)."""
        T, S, f = self.T, self.nsync + 1, self.f
        op = words[:, 0] & 0xFF
        tile, step = self.tile, self.step
        comp = np.zeros((S, T), np.int64)
        kern = ~np.isin(op, (isa.END, isa.SYNC, isa.EXCH, isa.REPEAT))
        np.add.at(comp, (step[kern], tile[kern]), kernel_cycles(op[kern], words[kern], f))
        ex = np.flatnonzero(op == isa.EXCH)
        send = np.zeros((S, T), np.int64)
        recv = np.zeros((S, T), np.int64)
        took = np.zeros((S, T), bool)
        took[step[ex], tile[ex]] = True
        if len(ex):
            ns, nr = words[ex, 2], words[ex, 3]
            ne = ns + nr
            base = self.table_index(tile[ex], words[ex, 1])
            inst = np.repeat(np.arange(len(ex)), ne)
            j = np.arange(len(inst)) - np.repeat(np.cumsum(ne) - ne, ne)
            at = base[inst] + j * isa.ENTRY_WORDS
            nbytes = table[at + 2] * table[at + 3]
            is_send = j < ns[inst]
            np.add.at(send, (step[ex][inst][is_send], tile[ex][inst][is_send]), nbytes[is_send])
            np.add.at(recv, (step[ex][inst][~is_send], tile[ex][inst][~is_send]), nbytes[~is_send])
        worst = np.maximum(send.max(1, initial=0), recv.max(1, initial=0))
        phase = f.exchange_phase_cycles + -(-worst // f.exchange_bytes_per_cycle)
        cyc = np.where(took, phase[:, None], comp)
        return cyc

    def check_scales(self, count: int = 1, code_s=None):
        """F_SCALE_TABLE words address an f32 of their tile's table, first and last
        iteration (relocation is linear in the iteration)."""
        for op, wd in SCALE_WORD.items():
            i = np.flatnonzero((self.op == op) & ((self.words[:, 0] >> 24 & isa.F_SCALE_TABLE) != 0))
            if not len(i):
                continue
            last = self.words[i, wd] + (count - 1) * (0 if code_s is None else code_s[i, wd])
            for a in (self.words[i, wd], last):
                self.table_index(self.tile[i], a)

    def step_cycles(self) -> np.ndarray:
        f, op, words = self.f, self.op, self.words
        base = self.costs(words, self.table).max(1) + f.sync_cycles
        S = self.nsync + 1
        # the segment after the last SYNC is a superstep only if a tile does something there
        last = (self.step == self.nsync) & (op != isa.END)
        steps = list(range(S if last.any() else S - 1))
        rep = np.flatnonzero(op == isa.REPEAT)
        if not len(rep):
            self.check_scales()
            return base[steps]
        if len(rep) != self.T or len(set(self.step[rep].tolist())) != 1:
            raise ValueError("REPEAT must start the same superstep on every tile")
        count, body, reloc, nreloc = (int(x) for x in self.words[rep[0], 1:5])
        bodyn = self.words[rep, 2]
        r0 = int(self.step[rep[0]])
        in_body = np.zeros(len(op), bool)
        for r, nb in zip(rep, bodyn):
            in_body[r + 1:r + 1 + nb] = True
        B = int(((op == isa.SYNC) & in_body)[rep[0]:rep[0] + 1 + int(bodyn[0])].sum())
        per_iter = [base[r0:r0 + B]] * count
        code_s, tab_s = self.relocations(rep, in_body)
        self.check_scales(count, self.code_strides)
        if code_s is not None:
            per_iter = []
            for i in range(count):
                w = (words + i * code_s) & 0xFFFFFFFF
                t = (self.table + i * tab_s) & 0xFFFFFFFF
                per_iter.append(self.costs(w, t).max(1)[r0:r0 + B] + f.sync_cycles)
        out = [base[:r0]] + per_iter + [base[r0 + B:len(steps)]]
        return np.concatenate(out)

    def relocations(self, rep, in_body):
        """Strides of relocated words (code, table) if any relocated word is one a
        cost reads; (None, None) when relocation moves addresses only."""
        code_s = self.code_strides = np.zeros_like(self.words)
        tab_s = np.zeros_like(self.table)
        rep = rep[self.words[rep, 4] > 0]
        n = self.words[rep, 4]
        if not len(rep):
            return None, None
        # the relocation entries of every tile: (tile, word address, stride)
        tile = np.repeat(self.tile[rep], n)
        j = np.arange(len(tile)) - np.repeat(np.cumsum(n) - n, n)
        at = np.repeat(self.table_index(self.tile[rep], self.words[rep, 3]), n) + j * isa.RELOC_WORDS
        waddr, stride = self.table[at], self.table[at + 1]
        c0 = self.code_addr[tile]
        first = np.searchsorted(self.tile, np.arange(self.T))            # each tile's first instruction
        ncode = np.bincount(self.tile, minlength=self.T)[tile]
        in_code = (waddr >= c0) & (waddr < c0 + ncode * isa.INSTR_BYTES)
        g = first[tile[in_code]] + (waddr[in_code] - c0[in_code]) // isa.INSTR_BYTES
        word = (waddr[in_code] - c0[in_code]) % isa.INSTR_BYTES // 4
        code_s[g, word] = stride[in_code]
        cost_word = np.zeros((max(isa.OP_NAMES) + 1, isa.INSTR_WORDS), bool)
        for op, ws in COST_WORDS.items():
            cost_word[op, list(ws)] = True
        costly = bool(cost_word[self.op[g], word].any())
        tg = self.table_index(tile[~in_code], waddr[~in_code])
        tab_s[tg] = stride[~in_code]
        # the table words the body's exchanges read as peer, row bytes or rows
        ex = np.flatnonzero((self.op == isa.EXCH) & in_body)
        ne = self.words[ex, 2] + self.words[ex, 3]
        base = np.repeat(self.table_index(self.tile[ex], self.words[ex, 1]), ne)
        k = np.arange(len(base)) - np.repeat(np.cumsum(ne) - ne, ne)
        read = (base + k * isa.ENTRY_WORDS)[:, None] + np.array(ENTRY_COST_WORDS)
        costly |= bool(np.isin(tg, read).any())
        return (code_s, tab_s) if costly else (None, None)


def step_cycles(program) -> np.ndarray:
    """Cycles of every executed superstep (sync included), in execution order."""
    return Oracle(program).step_cycles()


def host_cycles(program) -> int:
    f = dict(program.target)
    nbytes = [int((np.asarray(h["row_bytes"], np.int64) * np.asarray(h["rows"], np.int64)).sum())
              for h in (program.host_in, program.host_out)]
    return sum(-(-b // f["host_bytes_per_cycle"]) for b in nbytes)

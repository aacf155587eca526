"""The popops / popnn vertex estimators Tessera's vector kernels are costed with, each
transcribed from PopLibs' cycle estimators and generic in its perf-table entry, so a vertex's
figures live in one place whichever kernel runs it (the kernels' recipes: vector.py; MATMUL's
AMP vertex: amp.py).

Map of the file: ADD's vertices (add_binary_cycles, add_reduce_cycles, add_conv_reduce_cycles,
add_f32_reduce_cycles (f32 partials, policy.f32_partials);
which one an ADD runs: vector.add_cycles); BIAS's vertex, BroadcastVectorInner1D ADD
(bias_core_cycles, bias_cycles); PERF, the perf-table entries, and GELU's op cycles; the
element-wise and broadcast vertices (binary_op_1d_cycles, unary_op_1d_cycles,
broadcast_scalar_1d_cycles, broadcast_outer_by_row_cycles, broadcast_inner_mul_*); the row
reductions (reduce_split, reduce_rows_cycles); the non-linearity (nonlinearity_cycles);
Cast1D, CAST's vertex (cast_core_cycles, cast_split, cast_cycles)."""
from __future__ import annotations

import numpy as np

from . import _i64


# ---- ADD: out = src0 + nsrc1 partials, f16 (the residual add and a k-split's reduction) ----------
# Two sources are popops' binary ADD, more (or one) a strided reduction of equal-size partials
# (three or more: or poplin's ReduceAdd, the conv reduction vertex, where cheaper).
# Both split the elements over the workers: BinaryOp1D by its own ceil(n / workers); the
# reduction by one worker vertex per context, each ceil(n / workers) outputs (assumed: popops'
# ReductionConnection.cpp splits outputs between workers in vector-width grains; the even split
# is this model's reading). The partials' stride is 8-byte aligned (the simulator requires it),
# so the reduction's loop takes a whole 4-half vector per pass.

def add_binary_cycles(nelem, workers: int, vector_bytes: int):
    """BinaryOp1D ADD half (popopsCycleEstimators.cpp MAKE_PERF_ESTIMATOR_NAME(BinaryOp1D)):
    a worker runs 26 cycles plus binaryOpInnerLoopCycles: binaryOpPerfInfo {ADD, HALF} = 1 cycle
    a vector + 2 (hasExternalCodelet) per vector of 4 halves; x workers, +
    basicOpSupervisorOverhead 11 (popops/PerformanceEstimation.cpp)."""
    per_worker = -(-_i64(nelem) // workers)
    vectors = -(-per_worker // (vector_bytes // 2))
    return workers * (26 + (1 + 2) * vectors) + 11


def add_reduce_cycles(nelem, sources, workers: int, vector_bytes: int):
    """getCyclesEstimateForStridedReduce (popops reduction/CycleEstimationFunctions.cpp), half
    partials to half out, ADD, not update, one outer stride: entry/exit 4 + loop setup 11, then
    per loop of 4 outputs 3 + (1 + 7 storing the half result) + 3 + (sources - 1) cycles; one
    such worker vertex per context."""
    per_worker = -(-_i64(nelem) // workers)
    loops = -(-per_worker // (vector_bytes // 2))
    return workers * (4 + 11 + loops * (3 + 8 + 3 + (_i64(sources) - 1)))


def add_conv_reduce_cycles(nelem, sources, workers: int, vector_bytes: int):
    """poplin's ReduceAdd, the vertex a convolution's (so a matmul's) cross-tile reduction of
    equal-size partials runs (poplin PerformanceEstimation.hpp getReduceCycleEstimate, as its
    planner's estimateConvReduceCycles calls it; not single-input: partials from separate
    buffers, half partials and output): loops of the 128-bit accumulator width (8 halves = 2
    vectors) over the outputs, + 1 for each set bit below it; each worker ceil-less loops /
    workers, the left-over loops either one more a worker (a whole last loop) or, with a ragged
    tail, 2 x sources + 11 once; a loop 3 x sources + 8 (2 cycles to load 8 partials of 64-bit
    data + 1 for the next pointer, + 8 store and loop); + 32; x workers."""
    n, S = _i64(nelem), _i64(sources)
    acc = 2 * (vector_bytes // 2)
    loops = n // acc + sum((n >> i) & 1 for i in range(int(np.log2(acc))))
    each, left = loops // workers, loops % workers
    ragged = (n % acc) != 0
    cycles = 32 + np.where((left > 0) & ragged, 2 * S + 11, 0)
    each = each + ((left > 0) & ~ragged)
    per_loop = acc // min(acc, vector_bytes // 2) + 1
    return (cycles + (per_loop * S + 8) * each) * workers


def add_f32_reduce_cycles(nelem, sources, workers: int, vector_bytes: int):
    """A k-split's reduction of `sources` f32 partials to half out (policy.f32_partials): the
    cheaper of poplin's ReduceAdd<half, float> and popops' strided reduction of float partials.

    ReduceAdd (poplin PerformanceEstimation.hpp getReduceCycleEstimate, isPartialsFloat, not
    isOutTypeFloat, not single-input, as estimateConvReduceCycles calls it for the last stage
    of a conv's reduction): accVectorWidth 4 floats, 2 floats per 64-bit load, so a loop of 4
    outputs costs 4 / 2 + 1 (next pointer) = 3 cycles a source + 6; loops = outSize / 4 + 1
    for each set bit below 4; each worker loops // workers; the left-over loops one more each
    (whole) or, with a ragged tail, 2 x sources + 13 once; + 32; x workers.
    Strided (popops reduction/CycleEstimationFunctions.cpp getCyclesEstimateForStridedReduce,
    float partials, half out, ADD, not update, one outer stride): entry/exit 4 + loop setup
    11, then per loop of 2 outputs (gcd(min(4 accumulator floats, 2 per 64-bit path), stride))
    3 + (3 inner-loop completion + 2 half store) + 3 + (sources - 1); one worker vertex per
    context taking ceil(n / workers) outputs (the even split add_reduce_cycles assumes).
    popops' single-input ReduceAdd variant (partials in one region, outSize a multiple of 4)
    is not modelled: Tessera's local partial and the received ones are separate buffers."""
    n, S = _i64(nelem), _i64(sources)
    acc = 4 * (vector_bytes // 8)                                # 4 floats: the 128-bit accumulators
    loops = n // acc + sum((n >> i) & 1 for i in range(int(np.log2(acc))))
    each, left = loops // workers, loops % workers
    ragged = (n % acc) != 0
    per_loop = acc // min(acc, vector_bytes // 4) + 1
    conv = (32 + np.where((left > 0) & ragged, 2 * S + 13, 0)
            + (per_loop * S + 6) * (each + ((left > 0) & ~ragged))) * workers
    per_worker = -(-n // workers)
    strided = workers * (4 + 11 + -(-per_worker // (vector_bytes // 4)) * (3 + 5 + 3 + (S - 1)))
    return np.minimum(conv, strided)


# ---- BIAS: out[r, c] = src[r, c] + bias[c], f16 ---------------------------------------------------
# popops adds a vector along the inner dimension with BroadcastVectorInner1D ADD (the MultiVertex:
# the rows are the data blocks, shared between the workers), popopsCycleEstimators.cpp.

def bias_core_cycles(cols, blocks, vector_bytes: int):
    """vectorInnerAddCoreCycles_half: one worker adding the cols-long bias to `blocks` rows; the
    path by cols (> 2048 or ragged: scalar, 9 cycles an element; a multiple of 8: two vectors
    a loop from the accumulators; of 4 with 2+ rows: 2 cycles a row a vector)."""
    L, b = _i64(cols), _i64(blocks)
    lanes = vector_bytes // 2
    scalar = 5 + L * (2 + 9 * b + 3) + 1                                     # ..._half_scalar
    loops8 = L // (2 * lanes)
    mult8 = 2 + np.where(b == 1, 3 + 7 * loops8 + 1, 4 + loops8 * (8 + 2 * (b - 1) + 7) + 1)
    mult4 = 5 + (L // lanes) * (7 + 2 * (b // 2 - 1) + 1 + b % 2 + 5) + 1   # ..._half_multiple_of_4
    return np.select([b == 0, L > 2048, L % 8 == 0, b < 2, L % 4 == 0],
                     [1, 3 + scalar, 5 + mult8, 7 + scalar, 9 + mult4], 9 + scalar)


def bias_cycles(rows, cols, workers: int, vector_bytes: int):
    """BroadcastVectorInner1D ADD, not in place: vectorInnerMultiVertexAddCycles (supervisor
    1 + 6 x 2; the busiest worker: 19, + 4 + 3 for an odd bias length (+1 if no worker has a
    whole share), + the core) + 6 supervisor and 3 x workers preamble. dataBlockCountPacked
    = rows // workers << 3 | rows % workers: the busiest worker has one more row if any are
    left over. (The ADD estimator masks the remainder with 0x3, which drops 4 or 5 left-over
    rows; its DIVIDE sibling masks with 0x7: this model reads the field whole, as 0x7 does.)"""
    R, L = _i64(rows), _i64(cols)
    q, rem = R // workers, R % workers
    most = q + (rem != 0)
    worker = 19 + (L % 2) * (4 + (q == 0) + 3) + bias_core_cycles(L, most, vector_bytes)
    return 1 + 6 * 2 + worker * workers + 6 + 3 * workers


# ---- the other vector kernels: the popops / popnn vertices Poplar would run for each ---------------
# Each Tessera kernel below is the sequence of PopLibs vertices its popnn / popops counterpart
# builds on one tile (one vertex per step, the supervisor MultiVertex form, 64-bit aligned data);
# its cost is the sum of their estimates. The vertex terms are generic in the perf-table entry
# ("cycles a loop, elements a loop") that popops' ExprOpUtil perf tables (unaryOpPerfInfo,
# binaryOpPerfInfo, broadcastOpPerfInfo; graphcore/poplibs, the revision with loopUnrollFactor)
# give for the op and type; the entries used are PERF. For the ops whose table entry has
# naturalVectorWidth, a loop is one 64-bit vector and the estimator adds its own per-loop
# overhead (the +2 / +1 / +4 noted at each term). Types: f16 data; f32 for row statistics and
# the online-softmax state (Tessera keeps them in f32, popnn's statistics use float partials).

# (op, type) -> (elements a loop, cycles a loop); `None` elements = the natural vector width
PERF = {
    ("MULTIPLY", "f16"): (None, 1), ("SUBTRACT", "f16"): (None, 1), ("ADD", "f16"): (None, 1),  # broadcastOpPerfInfo
    ("MULTIPLY", "f32"): (None, 1), ("SUBTRACT", "f32"): (None, 1), ("ADD", "f32"): (None, 1),
    ("MAXIMUM", "f32"): (2, 4),                                                # binaryOpPerfInfo
    ("VARIANCE_TO_INV_STD_DEV", "f32"): (2, 12),                               # broadcastOpPerfInfo
    ("EXPONENT", "f16"): (4, 4), ("EXPONENT", "f32"): (2, 6), ("INVERSE", "f16"): (4, 15),  # unaryOpPerfInfo
    ("INVERSE", "f32"): (2, 6),
}
GELU_OP_CYCLES_HALF = 5     # popnn PerformanceEstimation.hpp getNonLinearityOpCycles(GELU, half): PopLibs' placeholder


def _loops(per_worker, entry, type_bytes: int, vector_bytes: int, natural_extra: int):
    """Loops and cycles a loop of one worker's `per_worker` elements under a PERF entry."""
    epl, cpl = entry
    if epl is None:
        return -(-_i64(per_worker) // (vector_bytes // type_bytes)), cpl + natural_extra
    return -(-_i64(per_worker) // epl), cpl


def binary_op_1d_cycles(nelem, entry, type_bytes: int, workers: int, vector_bytes: int):
    """BinaryOp1D (popopsCycleEstimators.cpp MAKE_PERF_ESTIMATOR_NAME(BinaryOp1D)): each worker
    26 + binaryOpInnerLoopCycles of its ceil(n / workers) elements (an ADD / SUBTRACT / MULTIPLY
    vector loop + 2 for the external codelet's load and store); x workers + basicOpSupervisorOverhead 11."""
    loops, cpl = _loops(-(-_i64(nelem) // workers), entry, type_bytes, vector_bytes, 2)
    return workers * (26 + loops * cpl) + 11


def unary_op_1d_cycles(nelem, entry, type_bytes: int, workers: int, vector_bytes: int, exponent: bool):
    """UnaryOp1D (popopsCycleEstimators.cpp MAKE_PERF_ESTIMATOR_NAME(UnaryOp1D)): each worker 33
    (EXPONENT) or 17, + unaryOpInnerLoopCycles of ceil(n / workers) elements (an unrolled entry:
    its cycles per loop; a vector entry + 4); x workers + 9 + basicOpSupervisorOverhead 11."""
    loops, cpl = _loops(-(-_i64(nelem) // workers), entry, type_bytes, vector_bytes, 4)
    return workers * ((33 if exponent else 17) + loops * cpl) + 9 + 11


def broadcast_scalar_1d_cycles(nelem, entry, type_bytes: int, workers: int, vector_bytes: int):
    """BroadcastScalar1D, not in place (PerformanceEstimation broadcastArithmetic1DCycleEstimate):
    each worker 20 + its ceil(n / workers) elements' loops (a vector entry + 1 for ADD / SUBTRACT /
    MULTIPLY's external codelet); x workers + basicOpSupervisorOverhead 11."""
    loops, cpl = _loops(-(-_i64(nelem) // workers), entry, type_bytes, vector_bytes, 1)
    return workers * (20 + loops * cpl) + 11


def broadcast_outer_by_row_cycles(rows, cols, entry, workers: int, vector_bytes: int):
    """BroadcastVectorOuterByRow1D, half, 64-bit aligned (popopsCycleEstimators.cpp
    BroadcastVectorOuterCycleEstimate, byRow, inner-loop overhead 1, outer 7): a row's value
    applied to its cols; each worker takes ceil(rows / workers) rows of 7 + the row's vectors x
    (cycles + 1); (15 + that) x workers + basicOpSupervisorOverhead 11."""
    loops, cpl = _loops(cols, entry, 2, vector_bytes, 1)
    return (15 + -(-_i64(rows) // workers) * (7 + loops * cpl)) * workers + 11


def broadcast_inner_mul_core_half(cols, blocks, vector_bytes: int):
    """vectorInnerMulCoreCycles_half, not in place: 1 + 2, a bias length not a multiple of 4 the
    scalar loop (4 + L(5 + 9b) + 1); else + 2 + 2 (+ 2 unless > 2044), then the multiple-of-4
    loop (3 + L/4 (4 + 2b + 3) + 1) when L > 2044 or b < 2, else its pipelined form
    (3 + L/4 (b = 1: 7, else 6 + b + 3) + 1)."""
    L, b = _i64(cols), _i64(blocks)
    loops = L // (vector_bytes // 2)
    scalar = 4 + L * (5 + 9 * b) + 1
    mult4 = 3 + loops * (4 + 2 * b + 3) + 1
    pipe = 3 + loops * np.where(b == 1, 7, 6 + b + 3) + 1
    return 3 + np.select([L % 4 != 0, L > 2044, b < 2], [scalar, 4 + mult4, 6 + mult4], 6 + pipe)


def broadcast_inner_mul_cycles(rows, cols, workers: int, vector_bytes: int):
    """BroadcastVectorInner1D MULTIPLY, half, not in place (vectorInnerMultiVertexMulCycles + 2 a
    worker): supervisor 1 + 6 x 2, + 24 x workers as written there, + the busiest worker's (19,
    + 4 + 3 (+ 1 if no worker has a whole share) for an odd length, + the core, + 2) x workers.
    The rows are the data blocks; the packed remainder read whole (as for BIAS)."""
    R, L = _i64(rows), _i64(cols)
    q, rem = R // workers, R % workers
    worker = 19 + (L % 2) * (4 + (q == 0) + 3) + broadcast_inner_mul_core_half(L, q + (rem != 0), vector_bytes)
    return 1 + 6 * 2 + 24 * workers + (worker + 2) * workers


def _continuous_reduce(outputs, partials, lanes: int):
    """One ContinuousReduce worker vertex (reduction/CycleEstimationFunctions.cpp
    getCycleEstimateReduceAllRegionsContinuous): outputs x partials / vector width, + 2 for an
    odd partial count, + 12 an output, + 10, + 7 call and return."""
    o, C = _i64(outputs), _i64(partials)
    return o * (C // lanes) + 2 * (C % 2) + 12 * o + 10 + 7


def reduce_split(rows, cols, workers: int, vector_bytes: int):
    """Pieces each row's reduction is cut into when a tile has fewer rows than workers, as
    popops' ReductionConnection.cpp splitTwoStageReductionsBetweenWorkers cuts them: while a
    worker is free, one more piece for the reduction with the most approximate cycles after
    the cut (equal rows: round robin), never reaching maxSplit = min(partials / 2, approximate
    cycles / 4) (getMaxSplit; approximateCyclesForReduction: partials / opsPerCycle, an ADD of
    half to one output 2 x the vector width a cycle). Returns (fewest, most) pieces of a row: 1
    where nothing is cut (rows >= workers, or rows too short)."""
    R, C = np.broadcast_arrays(_i64(rows), _i64(cols))
    lanes = vector_bytes // 2
    cap = np.maximum(1, np.minimum(C // 2, -(-C // (2 * lanes)) // 4) - 1)
    free = np.maximum(workers - R, 0)
    R1 = np.maximum(R, 1)
    return np.minimum(1 + free // R1, cap), np.minimum(1 + -(-free // R1), cap)


def reduce_rows_cycles(rows, cols, workers: int, vector_bytes: int):
    """A row reduction of half data (ADD, SQUARE_ADD or MAX; one output per row of cols contiguous
    partials): ContinuousReduce worker vertices (_continuous_reduce), one per worker context
    taking ceil(rows / workers) rows (assumed even split, as ADD's reduction), x workers. With
    fewer rows than workers, popops reduces in two stages (reduce_split): each row's pieces
    (splitRowsToWorkers: at most ceil(cols / pieces) partials) one a worker, then each row's
    piece results one row a worker; the two stages' vertices summed, x workers (the compute-set
    boundary between them is not charged, as between a kernel's other vertices)."""
    R, C = np.broadcast_arrays(_i64(rows), _i64(cols))
    lanes = vector_bytes // 2
    one = workers * _continuous_reduce(-(-R // workers), C, lanes)
    fewest, most = reduce_split(R, C, workers, vector_bytes)
    first, second = 0, 0
    for s in (fewest, most):                             # every row is cut one of the two ways
        k = np.where((C <= 3) | (s <= 1), 1, np.minimum(C // 2, -(-C // -(-C // s))))   # splitRowsToWorkers
        for piece in (C // k, C // k + (C % k != 0)):    # its pieces: C // k, one more for C % k of them
            first = np.maximum(first, _continuous_reduce(1, piece, lanes))
        second = np.maximum(second, np.where(k > 1, _continuous_reduce(1, k, lanes), 0))   # uncut rows: done
    return np.where(most > 1, workers * (first + second), one)


def nonlinearity_cycles(nelem, op_cycles: int, workers: int, vector_bytes: int):
    """popnn NonLinearitySupervisor, half (popnnCycleEstimators.cpp, the revision whose worker sum
    is written without the later SWISH term; see experiments/costs/README.md): supervisor 9, each
    worker 20 of set-up, for its ceil(vectors / workers) vectors 2 + op + (v - 1) 2 op + 1 + op,
    then the remainder checks 2 + 1 + 1 and (2 + op) for 2 left-over halves, (3 + op) for 1."""
    n = _i64(nelem)
    lanes = vector_bytes // 2
    v = -(-(n // lanes) // workers)
    rem = n % lanes
    vec = np.where(v > 0, 2 + op_cycles + (v - 1) * 2 * op_cycles + 1 + op_cycles, 0)
    tail = 4 + ((rem & 2) != 0) * (2 + op_cycles) + ((rem & 1) != 0) * (3 + op_cycles)
    return 9 + workers * (20 + vec + tail)


def cast_core_cycles(nelem, src_bytes: int, dst_bytes: int, vector_bytes: int):
    """castWorkerCycles (popops PerformanceEstimation.cpp), floating-point conversion on the aux
    pipeline: op width = min(2 x source loads, destination stores) a 64-bit access; 19 + the
    slower of its loads and stores per op vector, + 1 (+ 2 if that bit of the remainder is set)
    per bit of the op width. FP8 has no path there (assumed: read by its byte width, as a float
    conversion; C600's f16 <-> f8 instructions are conversions on the same pipeline)."""
    n = _i64(nelem)
    load, store = vector_bytes // src_bytes, vector_bytes // dst_bytes
    w = min(2 * load, store)
    per = max(w // min(w, load), w // min(w, store))
    rem = n % w
    bits = sum(1 + 2 * ((rem >> i) & 1) for i in range(int(np.ceil(np.log2(w)))))
    return 19 + per * (n // w) + bits


def cast_split(nelem, workers: int):
    """Elements of each worker (int64[..., workers]) for a Cast1D MultiVertex: whole 4-element
    grains, the first grains % workers workers one grain more, the last worker holding data
    short of the ragged tail (getCast1DPartition's fields workerElems, workerCount, workerLast,
    deltaLast; the function's body is not public: assumed this reading)."""
    n = _i64(nelem)[..., None]
    g = -(-n // 4)
    w = np.arange(workers, dtype=np.int64)
    e = 4 * (g // workers + (w < g % workers))
    last = np.where(g >= workers, workers - 1, g % workers - 1)
    return e - np.where(w == last, 4 * g - n, 0)


def cast_cycles(nelem, src_bytes, dst_bytes, workers: int, vector_bytes: int):
    """Cast1D (getCast1DCycleEstimate): 19 + workers x (the slowest worker's castWorkerCycles + 23).
    nelem, src_bytes, dst_bytes broadcast together (a batch may mix directions)."""
    n, sb, db = np.broadcast_arrays(_i64(nelem), _i64(src_bytes), _i64(dst_bytes))
    out = np.zeros(n.shape, np.int64)
    for s_, d_ in set(zip(sb.ravel().tolist(), db.ravel().tolist())):
        sel = (sb == s_) & (db == d_)
        worst = cast_core_cycles(cast_split(n[sel], workers), s_, d_, vector_bytes).max(-1)
        out[sel] = 19 + workers * (worst + 23)
    return out if out.ndim else out[()]

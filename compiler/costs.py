"""Kernel cycles as PopLibs estimates them: MATMUL (the AMP vertex Poplar would run for the
shape), ADD and BIAS (popops' vertices), and GELU, SOFTMAX, ONLINE_SOFTMAX, LAYERNORM, ROWSCALE,
CAST (the popops / popnn vertices their counterparts run, summed: the section at the end).
COPY is Poplar's own (no public estimator) and stays in target.py.

Map of the file: MATMUL's terms (amp_*, matmul_cycles); ADD (add_*); BIAS (bias_*); the vertex
terms of the other vector kernels (PERF, *_1d_cycles, broadcast_*, reduce_rows_cycles,
nonlinearity_cycles, cast_*), an f32 row value's cast to half (row_value_to_half_cycles), the
per-row / per-column vertex choice (by_row_cycles, by_col_cycles) and one function per kernel
(gelu_cycles ... rowscale_cycles).

MATMUL:

A tile's MATMUL (a [m, k] x b [k, n], f32 accumulation, f16 out) is, in PopLibs' terms,
a 1x1 convolution (poplin/MatMul.cpp: a matmul is a convolution whose field is the m rows,
input channels k, output channels n) run by the AMP vertex `ConvPartial1x1Out`; its cost
is that vertex's estimate, `MAKE_PERF_ESTIMATOR_NAME(ConvPartial1x1Out)` in
graphcore/poplibs lib/poplin/poplinCycleEstimators.cpp, which calls
`getConvPartial1x1SupervisorCycleEstimate` of lib/poplin/PerformanceEstimation.hpp.
The terms, each a function below named for the PopLibs function it transcribes:

  worker split    `amp_worker_rows`: the m output rows over the 6 workers as
                  partitionConvPartialByWorker (poplin/ConvUtil.cpp) splits them:
                  worker i gets rows [i*m//6, (i+1)*m//6). Every worker has one
                  work-list entry, possibly 0 rows (the codelet estimator reads
                  numFieldElems = worklist value + 3 for every context).
  worker loop     `amp_worker_cycles_half_float` / `_quarter`: one worker's cycles for
                  one pass (getConvPartial1x1SupervisorInnerLoopCycleEstimateHalfFloat /
                  ...Quarter): start-up, per-row core loop (coreCycles: 4 for half and
                  quarter, 8 for float; = in_group x out_group / amp_macs_per_cycle),
                  partials zeroing on the first input-channel pass, state-retention saving.
  pass time       `amp_pass_cycles`: the slowest worker x 6 (the supervisor issues to
                  the 6 contexts in turn), or the fastest x 6 + 14 if that is later
                  ("tag cost to worker with min cycles").
  weight loads    `amp_weight_load_cycles` (getConvPartialAmpSupervisorWeightLoadCycleEstimate):
                  numConvUnits x weightBytesPerConvUnit / convUnitCoeffLoadBytesPerCycle per pass.
  supervisor      `amp_supervisor_half_float` / `_quarter`
                  (getConvPartial1x1SupervisorOuterLoopCycleEstimateHalfFloat / ...Quarter):
                  non-loop overhead, conv-group / out-group / in-group loop overheads,
                  the first in-group pass with zeroing, the later ones without, the
                  worker-state retention cycles.
  output cast     `amp_output_cast_cycles`: f32 partials -> f16 out, the separate Cast the
                  planner charges when partials and output types differ and there is no
                  reduction (estimateConvReduceCycles -> estimateCastCycles, poplin/ConvPlan.cpp).

The vertex: activations are a's type, or the slower operand's (amp_dtype: an f16 x fp8
product runs as f16). Half and float activations use float partials (PopLibs' default
partialsType, and Tessera's f32 accumulation): numConvUnits = amp_out_group, one output
pass per group (outChansPerGroup = numConvUnits), inChansPerGroup = amp_in_group
(weightsPerConvUnit). QUARTER (FP8) activations have only the half-partials AMP vertex
(ConvVertexType.cpp canUseConvolutionInstruction refuses QUARTER with float partials), so
an FP8 x FP8 MATMUL is costed as that vertex and no cast (Tessera's numerics stay the exact
f32 sum; only the cost follows the vertex). One conv group per call. The constants are
the vertex code's (PopLibs's transcription of its assembly); the machine figures (workers,
channel groups, rates, load width) come from the target YAML.

Every function accepts numpy arrays for m, k, n (the planner prices whole grids at once).
compiler/sim/oracle.py re-derives the same estimate separately; tests/sim/test_costs.py
pins hand-computed values (experiments/costs/README.md) and mutates each term.
"""
from __future__ import annotations

import numpy as np

DTYPE_BYTES = {"fp8": 1, "f16": 2, "f32": 4}


def _i64(x):
    return np.asarray(x, np.int64)


def amp_worker_rows(m, workers: int):
    """Rows of each worker: int64[..., workers] (partitionConvPartialByWorker, ConvUtil.cpp)."""
    m = _i64(m)[..., None]
    i = np.arange(workers, dtype=np.int64)
    return ((i + 1) * m) // workers - (i * m) // workers


def amp_worker_cycles_half_float(e, zeroing: bool, float_acts: bool, conv_units: int, core: int):
    """One worker, one pass, float partials (PerformanceEstimation.hpp
    getConvPartial1x1SupervisorInnerLoopCycleEstimateHalfFloat with floatPartials).
    Half activations take the code path PopLibs shares between half x float partials
    and half x 16 units; float activations their own, zeroing 8 cycles a row with 16
    conv units, else 4; the state-retention saving (7) is half activations' only."""
    e = _i64(e)
    z = int(bool(zeroing))
    if float_acts:
        zc = 8 if conv_units == 16 else 4
        c = np.select([e == 0, e == 1, e == 2],
                      [24, 47 + (2 + zc) * z, 46 + (2 + 2 * zc) * z],
                      46 + (2 + zc * e) * z + (e - 3) * core)
        return c
    c = np.select([e == 0, e == 1, e == 2],
                  [20 + (2 - z), 31 + (2 - z), 40 + (2 - z)],
                  (38 - z) + (e - 3) * core)
    return c - 7


def amp_worker_cycles_quarter(e, zeroing: bool, core: int):
    """One worker, one pass, QUARTER activations (getConvPartial1x1SupervisorInnerLoopCycleEstimateQuarter):
    20 cycles of worker overhead, then by rows; zeroing saves 5."""
    e = _i64(e)
    zs = 5 if zeroing else 0
    return 20 + np.select([e == 0, e == 1, e == 2], [0, 17 - zs, 22 - zs], 29 - zs + (e - 3) * core)


def amp_pass_cycles(worker_cycles, workers: int):
    """A pass as the supervisor sees it: max over workers x workers, at least the
    minimum x workers + 14 (the tag cost)."""
    w = _i64(worker_cycles)
    return np.maximum(w.max(-1) * workers, w.min(-1) * workers + 14)


def amp_weight_load_cycles(conv_units: int, in_group: int, elem_bytes: int, load_bytes_per_cycle: int) -> int:
    """getConvPartialAmpSupervisorWeightLoadCycleEstimate (filter height 1): every conv
    unit's weightsPerConvUnit x element bytes at convUnitCoeffLoadBytesPerCycle."""
    return conv_units * in_group * elem_bytes // load_bytes_per_cycle


def amp_supervisor_half_float(in_groups, out_groups, loads: int, inner_z, inner_nz, workers: int,
                              float_acts: bool):
    """getConvPartial1x1SupervisorOuterLoopCycleEstimateHalfFloat, one conv group, one
    output pass per group, float partials (the shared code path: +1 / -1 cycles)."""
    gi, go = _i64(in_groups), _i64(out_groups)
    keep, keep_in = (0, 0) if float_acts else (7, 3)    # conv1x1WorkerRetentionSavings
    retention = workers * (keep + keep_in * (gi - 1))
    later = (gi - 1) * (15 - 1 + 1 + go * (19 + 6 + loads + inner_nz))
    first = 10 + 1 + go * (19 - 1 + 7 + loads + inner_z)
    return 50 + retention + (12 + 1) + later + first


def amp_supervisor_quarter(in_groups, out_groups, loads: int, inner_z, inner_nz, workers: int):
    """getConvPartial1x1SupervisorOuterLoopCycleEstimateQuarter, one conv group."""
    gi, go = _i64(in_groups), _i64(out_groups)
    call = 6 * workers
    first = (14 * workers + 11 + call) + loads + inner_z
    later = (gi - 1) * ((11 * workers + 6 + call) + loads + inner_nz)
    return 46 + (2 * workers + 9) + go * ((6 * workers + 10) + first + later)


def amp_output_cast_cycles(m, n, workers: int, vector_bytes: int):
    """f32 partials to f16 out (ConvPlan.cpp estimateCastCycles): each worker's share of
    m x n, the longer of reading f32 and writing f16 vectors, + 26, times the workers."""
    per_worker = -(-(_i64(m) * _i64(n)) // workers)
    read = -(-per_worker // (vector_bytes // 4))
    write = -(-per_worker // (vector_bytes // 2))
    return (np.maximum(read, write) + 26) * workers


def matmul_cycles(t, m, k, n, dtype: str):
    """The AMP estimate for an m x k x n product whose activations run as `dtype`
    (the slower operand's, Target.amp_dtype); `t` the Target."""
    W = t.workers
    gi_n, go_n = t.amp_in_group[dtype], t.amp_out_group[dtype]
    core = gi_n * go_n // t.amp_macs_per_cycle[dtype]
    in_groups, out_groups = -(-_i64(k) // gi_n), -(-_i64(n) // go_n)
    rows = amp_worker_rows(m, W)
    loads = amp_weight_load_cycles(go_n, gi_n, DTYPE_BYTES[dtype], t.amp_weight_load_bytes_per_cycle)
    if dtype == "fp8":
        inner_z = amp_pass_cycles(amp_worker_cycles_quarter(rows, True, core), W)
        inner_nz = amp_pass_cycles(amp_worker_cycles_quarter(rows, False, core), W)
        return amp_supervisor_quarter(in_groups, out_groups, loads, inner_z, inner_nz, W)
    fa = dtype == "f32"
    inner_z = amp_pass_cycles(amp_worker_cycles_half_float(rows, True, fa, go_n, core), W)
    inner_nz = amp_pass_cycles(amp_worker_cycles_half_float(rows, False, fa, go_n, core), W)
    return (amp_supervisor_half_float(in_groups, out_groups, loads, inner_z, inner_nz, W, fa)
            + amp_output_cast_cycles(m, n, W, t.vector_bytes_per_cycle))


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


def add_cycles(nelem, nsrc1, workers: int, vector_bytes: int):
    """Two sources: popops' BinaryOp1D ADD; one: the strided reduction; three or more (a k-split's
    partials): the cheaper of popops' strided reduction and poplin's ReduceAdd (the deeper the
    reduction, the more the strided one's 1 cycle a source per 4 outputs beats ReduceAdd's 3 per 8)."""
    sources = _i64(nsrc1) + 1
    strided = add_reduce_cycles(nelem, sources, workers, vector_bytes)
    many = np.minimum(strided, add_conv_reduce_cycles(nelem, sources, workers, vector_bytes))
    return np.where(sources == 2, add_binary_cycles(nelem, workers, vector_bytes),
                    np.where(sources >= 3, many, strided))


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


def row_value_to_half_cycles(rows, workers: int, vector_bytes: int):
    """An f32 value per row (a statistic, a scale) cast to half, because the vertex that applies
    it to the half data takes both operands in one type (popops' BroadcastVectorOuterByRow1D /
    BroadcastScalar1D are templated on a single type): Cast1D f32 -> f16 of `rows` elements."""
    return cast_cycles(rows, 4, 2, workers, vector_bytes)


def by_row_cycles(rows, cols, op: str, workers: int, vector_bytes: int):
    """A half op with one f32-statistic value per row (x - mean, x * invStdDev, x * 1/sum): the
    BroadcastVectorOuterByRow1D vertex; a single row's value is a scalar to popops' element-wise
    ops (ElementWise.cpp broadcasts it as one), so one row runs BroadcastScalar1D over its cols."""
    e = PERF[(op, "f16")]
    return np.where(_i64(rows) == 1, broadcast_scalar_1d_cycles(cols, e, 2, workers, vector_bytes),
                    broadcast_outer_by_row_cycles(rows, cols, e, workers, vector_bytes))


def by_col_cycles(rows, cols, op: str, workers: int, vector_bytes: int):
    """gamma (MULTIPLY) or beta (ADD), one value per column: BroadcastVectorInner1D (BIAS's vertex
    for ADD); a single row is the same shape as gamma, an element-wise BinaryOp1D."""
    one = binary_op_1d_cycles(_i64(rows) * _i64(cols), PERF.get((op, "f16"), (None, 1)), 2, workers, vector_bytes)
    many = (broadcast_inner_mul_cycles(rows, cols, workers, vector_bytes) if op == "MULTIPLY"
            else bias_cycles(rows, cols, workers, vector_bytes))
    return np.where(_i64(rows) == 1, one, many)


def _b1(n, op, d, W, V):
    return binary_op_1d_cycles(n, PERF[(op, d)], DTYPE_BYTES[d], W, V)


def gelu_cycles(nelem, workers: int, vector_bytes: int):
    """GELU = popnn's GELU non-linearity (NonLinearitySupervisor, its GELU op cycles)."""
    return nonlinearity_cycles(nelem, GELU_OP_CYCLES_HALF, workers, vector_bytes)


def softmax_cycles(rows, cols, workers: int, vector_bytes: int, scaled=True):
    """SOFTMAX = popnn softmaxImpl (stable): the scale (BroadcastScalar1D MULTIPLY), row max
    (reduce), x - max (BroadcastVectorOuterByRow SUBTRACT), exp (UnaryOp1D EXPONENT), row sum
    (reduce), the division by the sums as their reciprocal (UnaryOp1D INVERSE on the rows) and a
    BroadcastVectorOuterByRow MULTIPLY (see the README on popnn's divInPlace). The scale's
    multiply only where `scaled` (the scale word is not 1.0): popnn's softmax has no scale, and
    Poplar builds no multiply by a constant one (an attention's 1/sqrt(d) is applied by its
    score MATMUL's scale word, so its SOFTMAX runs at scale 1)."""
    W, V, n = workers, vector_bytes, _i64(rows) * _i64(cols)
    return ((_i64(scaled) != 0) * broadcast_scalar_1d_cycles(n, PERF[("MULTIPLY", "f16")], 2, W, V)
            + 2 * reduce_rows_cycles(rows, cols, W, V)
            + by_row_cycles(rows, cols, "SUBTRACT", W, V)
            + unary_op_1d_cycles(n, PERF[("EXPONENT", "f16")], 2, W, V, True)
            + unary_op_1d_cycles(rows, PERF[("INVERSE", "f16")], 2, W, V, False)
            + by_row_cycles(rows, cols, "MULTIPLY", W, V))


def online_softmax_cycles(rows, cols, workers: int, vector_bytes: int):
    """ONLINE_SOFTMAX = the scale, row max (reduce, f32 out), m' = max(m, row max) (BinaryOp1D MAXIMUM
    f32), c = exp(m - m') (BinaryOp1D SUBTRACT, UnaryOp1D EXPONENT f32), m' to half for the half
    vertex that subtracts it (Cast1D f32 -> f16 of the rows), s - m' (BroadcastVectorOuterByRow
    SUBTRACT), exp (UnaryOp1D EXPONENT half), row sum (reduce, f32 out), l = l c + sum (BinaryOp1D
    MULTIPLY and ADD f32). Every step runs, the first block's too (its state is still written)."""
    W, V, n = workers, vector_bytes, _i64(rows) * _i64(cols)
    return (broadcast_scalar_1d_cycles(n, PERF[("MULTIPLY", "f16")], 2, W, V)
            + 2 * reduce_rows_cycles(rows, cols, W, V)
            + _b1(rows, "MAXIMUM", "f32", W, V) + _b1(rows, "SUBTRACT", "f32", W, V)
            + unary_op_1d_cycles(rows, PERF[("EXPONENT", "f32")], 4, W, V, True)
            + row_value_to_half_cycles(rows, W, V)
            + by_row_cycles(rows, cols, "SUBTRACT", W, V)
            + unary_op_1d_cycles(n, PERF[("EXPONENT", "f16")], 2, W, V, True)
            + _b1(rows, "MULTIPLY", "f32", W, V) + _b1(rows, "ADD", "f32", W, V))


def layernorm_cycles(rows, cols, workers: int, vector_bytes: int):
    """LAYERNORM = popnn's layer norm: row sums of x and x^2 (two reductions, the 1/cols scale
    folded in, f32 out), var = E[x^2] - mean^2 (BinaryOp1D MULTIPLY and SUBTRACT f32 on the rows),
    1/sqrt(var + eps) (BroadcastScalar1D VARIANCE_TO_INV_STD_DEV f32), the f32 mean and invStdDev
    to half for the half vertices that apply them (two Cast1D f32 -> f16 of the rows), whitening
    (x - mean) x invStdDev (BroadcastVectorOuterByRow SUBTRACT and MULTIPLY), then gamma
    (BroadcastVectorInner1D MULTIPLY) and beta (BroadcastVectorInner1D ADD, BIAS's estimate)."""
    W, V = workers, vector_bytes
    return (2 * reduce_rows_cycles(rows, cols, W, V)
            + _b1(rows, "MULTIPLY", "f32", W, V) + _b1(rows, "SUBTRACT", "f32", W, V)
            + broadcast_scalar_1d_cycles(rows, PERF[("VARIANCE_TO_INV_STD_DEV", "f32")], 4, W, V)
            + 2 * row_value_to_half_cycles(rows, W, V)
            + by_row_cycles(rows, cols, "SUBTRACT", W, V) + by_row_cycles(rows, cols, "MULTIPLY", W, V)
            + by_col_cycles(rows, cols, "MULTIPLY", W, V) + by_col_cycles(rows, cols, "ADD", W, V))


def rowscale_cycles(rows, cols, add, recip, workers: int, vector_bytes: int):
    """ROWSCALE = with F_RECIP the reciprocal of the f32 row vector (UnaryOp1D INVERSE f32, Tessera
    divides in f32), the row vector to half for the half multiply (Cast1D f32 -> f16 of the rows),
    BroadcastVectorOuterByRow MULTIPLY, and with F_ADD a BinaryOp1D ADD half of the addend.
    (popops' ScaledAdd is not a candidate: its scale is one scalar tensor, ScaledAdd.hpp, where
    ROWSCALE's is one a row; a single row keeps the same two vertices, as its multiply does.)"""
    W, V = workers, vector_bytes
    n = _i64(rows) * _i64(cols)
    return ((_i64(recip) != 0) * unary_op_1d_cycles(rows, PERF[("INVERSE", "f32")], 4, W, V, False)
            + row_value_to_half_cycles(rows, W, V)
            + by_row_cycles(rows, cols, "MULTIPLY", W, V) + (_i64(add) != 0) * add_binary_cycles(n, W, V))

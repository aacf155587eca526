"""MATMUL's cycles as PopLibs estimates them (the vector kernels' are vertices.py and
vector.py beside this file; what the three share, compiler/costs/__init__.py).

Map of the file: the terms (amp_*), top-down as the estimate nests them, then matmul_cycles,
which combines them for a Target.

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

b in segments (MATMUL flag F_SEG_B, isa.py: b's columns in ranges at separate addresses,
e.g. a ring piece read where it lives, compiler/expand/ring.py) costs what one block does:
the vertex's `weights` field is a vector of pointers, one per (conv group, in-channel group,
out-channel group) block (`Vector<Input<Vector<FPType, ...>>> weights`, indexed
cg * numOutGroups * numInGroups + ig * numOutGroups + og, in the ConvPartial1x1Out codelet,
graphcore/poplibs lib/poplin/codelets/ConvPartial1x1Out.cpp), and the supervisor loads a
pointer for every pass whatever the blocks' addresses; the estimate has no term for them.
So a segment boundary on an out-channel group edge changes nothing (the machine refuses
others: a group cannot straddle two pointers), and matmul_cycles below is the figure.

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

from . import DTYPE_BYTES, _i64


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


def matmul_cycles(t, m, k, n, dtype: str, f32_out=False):
    """The AMP estimate for an m x k x n product whose activations run as `dtype`
    (the slower operand's, Target.amp_dtype); `t` the Target. f32_out (MATMUL flag
    F_F32_OUT, a k-split's f32 partials: policy.f32_partials): no output cast, as
    estimateConvReduceCycles charges none where a reduction follows (the reduction
    reads float partials and writes half once)."""
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
    cast = amp_output_cast_cycles(m, n, W, t.vector_bytes_per_cycle) * (1 - np.asarray(f32_out, np.int64))
    return amp_supervisor_half_float(in_groups, out_groups, loads, inner_z, inner_nz, W, fa) + cast

"""Kernel cycles as PopLibs estimates them, one module per kind of estimate:

  amp.py       MATMUL: the AMP vertex `ConvPartial1x1Out` Poplar would run for the shape,
               term by term (worker split, worker loop, pass, weight loads, supervisor,
               output cast)
  vertices.py  the popops / popnn vertex estimators the vector kernels are built of, each
               generic in its perf-table entry: ADD's three (BinaryOp1D, the strided
               reduction, poplin's ReduceAdd), BroadcastVectorInner1D ADD (BIAS), the
               BinaryOp1D / UnaryOp1D / broadcast vertices, the row reductions, the
               non-linearity, Cast1D (CAST); and PERF, the perf-table entries
  vector.py    Tessera's other vector kernels (ADD, GELU, SOFTMAX, ONLINE_SOFTMAX, LAYERNORM,
               ROWSCALE) as the sums of the vertices their popnn / popops counterparts run
  merge.py     MERGE (split-key attention's merge of partial states): PopLibs has no such
               vertex, so the popops vertices a Poplar program would run for it, summed

Separate because they are separate transcriptions: amp.py follows poplin's
PerformanceEstimation.hpp, vertices.py popops' and popnn's cycle estimators one vertex at a
time, and vector.py only says which vertices each kernel runs and sums them, so a change to
a vertex's figure and a change to a kernel's recipe land in different files. COPY is Poplar's
own (no public estimator) and stays in target.py, the one caller (`Target.matmul_cycles`,
`Target.gelu_cycles`, ...).

Every function accepts numpy arrays for its shape arguments (the planner prices whole grids
at once). compiler/sim/oracle.py re-derives the same estimates separately and imports none
of this package; tests/sim/test_costs.py pins hand-computed values
(experiments/costs/README.md) and mutates each term in every module that binds it.

This file holds only what the three share, and imports none of them.
"""
from __future__ import annotations

import numpy as np

DTYPE_BYTES = {"fp8": 1, "f16": 2, "f32": 4}


def _i64(x):
    return np.asarray(x, np.int64)

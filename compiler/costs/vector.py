"""Tessera's vector kernels' cycles as recipes: each kernel is the sequence of popops / popnn
vertices its PopLibs counterpart builds on one tile, and its cost the sum of their estimates
(vertices.py, beside this file). This file says only which vertices run, how often and on
what. BIAS and CAST are one vertex each (vertices.bias_cycles, vertices.cast_cycles).

Map of the file: ADD's choice between its three vertices (add_cycles); an f32 row value's cast
to half (row_value_to_half_cycles); the per-row / per-column vertex choice (by_row_cycles,
by_col_cycles); one function per kernel (gelu_cycles ... rowscale_cycles)."""
from __future__ import annotations

import numpy as np

from . import DTYPE_BYTES, _i64
from .vertices import (GELU_OP_CYCLES_HALF, PERF, add_binary_cycles, add_conv_reduce_cycles, add_f32_reduce_cycles,
                       add_reduce_cycles,
                       bias_cycles, binary_op_1d_cycles, broadcast_inner_mul_cycles, broadcast_outer_by_row_cycles,
                       broadcast_scalar_1d_cycles, cast_cycles, nonlinearity_cycles, reduce_rows_cycles,
                       unary_op_1d_cycles)


def add_cycles(nelem, nsrc1, workers: int, vector_bytes: int, f32_src=False):
    """Two sources: popops' BinaryOp1D ADD; one: the strided reduction; three or more (a k-split's
    partials): the cheaper of popops' strided reduction and poplin's ReduceAdd (the deeper the
    reduction, the more the strided one's 1 cycle a source per 4 outputs beats ReduceAdd's 3 per 8).
    f32_src (ADD's dtype2 f32: a k-split's f32 partials, policy.f32_partials): any number of
    sources is the float-partials reduction to half (vertices.add_f32_reduce_cycles); BinaryOp1D
    takes one type, so it has no such form. Arrays broadcast together."""
    f32_src = np.asarray(f32_src, bool)
    if f32_src.all():
        return add_f32_reduce_cycles(nelem, _i64(nsrc1) + 1, workers, vector_bytes)
    if f32_src.any():
        return np.where(f32_src, add_f32_reduce_cycles(nelem, _i64(nsrc1) + 1, workers, vector_bytes),
                        add_cycles(nelem, nsrc1, workers, vector_bytes))
    sources = _i64(nsrc1) + 1
    strided = add_reduce_cycles(nelem, sources, workers, vector_bytes)
    many = np.minimum(strided, add_conv_reduce_cycles(nelem, sources, workers, vector_bytes))
    return np.where(sources == 2, add_binary_cycles(nelem, workers, vector_bytes),
                    np.where(sources >= 3, many, strided))


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


def softmax_cycles(rows, cols, workers: int, vector_bytes: int, scaled=True, deferred=False):
    """SOFTMAX = popnn softmaxImpl (stable): the scale (BroadcastScalar1D MULTIPLY), row max
    (reduce), x - max (BroadcastVectorOuterByRow SUBTRACT), exp (UnaryOp1D EXPONENT), row sum
    (reduce), the division by the sums as their reciprocal (UnaryOp1D INVERSE on the rows) and a
    BroadcastVectorOuterByRow MULTIPLY (see the README on popnn's divInPlace). The scale's
    multiply only where `scaled` (the scale word is not 1.0): popnn's softmax has no scale, and
    Poplar builds no multiply by a constant one (an attention's 1/sqrt(d) is applied by its
    score MATMUL's scale word, so its SOFTMAX runs at scale 1).

    `deferred` (isa.F_SM_DEFER, policy.deferred_norm): the rows stop after the row sum (its
    reduction writes the f32 sums, as ONLINE_SOFTMAX's does): no INVERSE, no by-row MULTIPLY;
    the division is a ROWSCALE after p·v (rowscale_cycles)."""
    W, V, n = workers, vector_bytes, _i64(rows) * _i64(cols)
    norm = _i64(deferred) == 0
    return ((_i64(scaled) != 0) * broadcast_scalar_1d_cycles(n, PERF[("MULTIPLY", "f16")], 2, W, V)
            + 2 * reduce_rows_cycles(rows, cols, W, V)
            + by_row_cycles(rows, cols, "SUBTRACT", W, V)
            + unary_op_1d_cycles(n, PERF[("EXPONENT", "f16")], 2, W, V, True)
            + norm * (unary_op_1d_cycles(rows, PERF[("INVERSE", "f16")], 2, W, V, False)
                      + by_row_cycles(rows, cols, "MULTIPLY", W, V)))


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


def layernorm_cycles(rows, cols, workers: int, vector_bytes: int, flags=0):
    """LAYERNORM = popnn's layer norm: row sums of x and x^2 (two reductions, the 1/cols scale
    folded in, f32 out), var = E[x^2] - mean^2 (BinaryOp1D MULTIPLY and SUBTRACT f32 on the rows),
    1/sqrt(var + eps) (BroadcastScalar1D VARIANCE_TO_INV_STD_DEV f32), the f32 mean and invStdDev
    to half for the half vertices that apply them (two Cast1D f32 -> f16 of the rows), whitening
    (x - mean) x invStdDev (BroadcastVectorOuterByRow SUBTRACT and MULTIPLY), then gamma
    (BroadcastVectorInner1D MULTIPLY) and beta (BroadcastVectorInner1D ADD, BIAS's estimate).

    A row split over two tiles (policy.ln_halves; flags, isa.F_LN_STATS / F_LN_HALF) runs the
    same vertices on its half: F_LN_STATS the two reductions of its cols; F_LN_HALF adds the two
    halves' f32 partial sums (the last stage of popops' cross-tile reduction, two partials an
    output: BinaryOp1D ADD float over the 2 x rows sums, assumed the vertex Poplar picks for a
    two-input reduction of contiguous outputs), then everything after the reductions over its
    cols. The two together cost the whole-row recipe at cols plus that ADD."""
    W, V = workers, vector_bytes
    fl = _i64(flags)
    red = 2 * reduce_rows_cycles(rows, cols, W, V)
    rest = (_b1(rows, "MULTIPLY", "f32", W, V) + _b1(rows, "SUBTRACT", "f32", W, V)
            + broadcast_scalar_1d_cycles(rows, PERF[("VARIANCE_TO_INV_STD_DEV", "f32")], 4, W, V)
            + 2 * row_value_to_half_cycles(rows, W, V)
            + by_row_cycles(rows, cols, "SUBTRACT", W, V) + by_row_cycles(rows, cols, "MULTIPLY", W, V)
            + by_col_cycles(rows, cols, "MULTIPLY", W, V) + by_col_cycles(rows, cols, "ADD", W, V))
    combine = _b1(2 * _i64(rows), "ADD", "f32", W, V)
    return np.where(fl == 1, red, np.where(fl == 2, combine + rest, red + rest))


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

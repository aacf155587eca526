"""Offline calibration of FP8 activation scales (model.fp8_scales=calibrated).

The host evaluates the model as the device runs it (the reference's ops, f16 rounding,
the FP8 casts) on calibration inputs that are NOT the trial's input, and takes each
cast's scale per layer from the largest |x| it meets there: scale_i = headroom ·
amax_i / FP8_MAX. Each calibration input is evaluated with casts scaled by its own
amax so far; the scales kept are the largest over the inputs. The casts saturate,
so an input whose activations exceed headroom · amax clips there: calibration trades
that risk for mantissa (e4m3 keeps 3 bits of mantissa only down to 2^-6 of 448; a
scale far above the data pushes it into subnormals and to zero). Costs 0 device cycles
and one host evaluation of the Repeat body per calibration input."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Op
from .gemm import FP8_MAX


def cast_amax(g: Graph, data: dict, inputs: dict) -> dict[int, np.ndarray]:
    """{cast op index: float64[count] amax of its input per iteration} on `data` with
    `inputs` (name -> array) in place of the trial's inputs; the casts of iteration i
    scale by that amax (headroom 1: no clipping on this input)."""
    L = g.repeat.count if g.repeat else 1
    amax = {n: np.zeros(L) for n, op in enumerate(g.ops) if op.kind == "cast"}

    def rewrite(n, op, i, env):
        if op.kind != "cast":
            return op
        amax[n][i] = float(np.abs(env[op.inputs[0]]).max())
        return dataclasses.replace(op, attrs=_with_scale(op, float(amax[n][i] / FP8_MAX) or 1.0))

    from .. import reference     # here: every stage imports the models, few need numba's start-up
    reference.evaluate(g, {**data, **inputs}, rewrite=rewrite)
    return amax


def _with_scale(op: Op, scale) -> tuple:
    return tuple(sorted({**dict(op.attrs), "scale": scale}.items()))


def calibrate(g: Graph, data: dict, samples: list[dict], headroom: float) -> dict[str, tuple]:
    """Set every cast's per-layer scale (its op's `scale` attr and its output tensor's
    scale, tuples of count) from the samples; returns {cast output: scales}."""
    amax = {}
    for inputs in samples:
        for n, a in cast_amax(g, data, inputs).items():
            amax[n] = np.maximum(amax.get(n, 0), a)
    out = {}
    first, stop = g.body()
    for n, a in amax.items():
        op = g.ops[n]
        scale = tuple(float(headroom * v / FP8_MAX) or 1.0 for v in a)
        if len(scale) == 1 or not first <= n < stop:       # outside the body: one scale
            scale = max(scale)
        g.ops[n] = dataclasses.replace(op, attrs=_with_scale(op, scale))
        y = op.outputs[0]
        g.tensors[y] = dataclasses.replace(g.tensors[y], scale=scale)
        out[y] = scale
    return out

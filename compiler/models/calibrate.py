"""Offline calibration of FP8 activation scales (model.fp8_scales=calibrated, least_error).

The host evaluates the model as the device runs it (the reference's ops, f16 rounding,
the FP8 casts) on calibration inputs that are NOT the trial's input, and takes each
cast's scale per layer from the largest |x| it meets there: scale_i = headroom ·
amax_i / FP8_MAX. Each calibration input is evaluated with casts scaled by its own
amax so far; the scales kept are the largest over the inputs. The casts saturate,
so an input whose activations exceed headroom · amax clips there: calibration trades
that risk for mantissa (e4m3 keeps 3 bits of mantissa only down to 2^-6 of 448; a
scale far above the data pushes it into subnormals and to zero). Costs 0 device cycles
and one host evaluation of the Repeat body per calibration input.

least_error (least_error_scales): a floor only bounds the scale from below; where in a
binade the scale sits decides which values e4m3's grid holds exactly, and so the rounding
error (e4m3's relative grid repeats every binade, so a scale and twice it err alike but for
subnormals and saturation). Each cast's scale per layer is 2^(k + j/STEPS): j the step whose
rounding of the cast's inputs errs least (squared error summed over the calibration inputs),
k the smallest integer with the scale >= headroom · amax / FP8_MAX over them (so it clips
like `calibrated`). Against the static bounds, and without centring (models/centering.py,
which runs before it), the outputs' rms error against FP16 activations is lower by
1.18 ± 0.41 % of itself over 16 seeds at 27 layers (lower on 12), by 0.38 ± 0.09 % over 24
seeds at 4 layers (on 20; experiments/fp8_scales/README.md). The
f16 histogram (_f16_histogram) makes the search cost one pass over each cast input."""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import exact
from ..ir import Graph, Op
from .gemm import FP8, FP8_MAX

STEPS = 16     # candidate scales per binade, 2^(1/16) = 4.4 % apart (assumed; as scan.py scans)


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
    return _set_scales(g, {n: [float(headroom * v / FP8_MAX) or 1.0 for v in a] for n, a in amax.items()})


def _set_scales(g: Graph, per_layer: dict[int, list]) -> dict[str, tuple]:
    """Give each cast op n the scales per_layer[n] (op attr and output tensor: a tuple
    over the Repeat's iterations; outside the body, their largest) -> {cast output: scale}."""
    out = {}
    first, stop = g.body()
    for n, scales in per_layer.items():
        op = g.ops[n]
        scale = tuple(scales)
        if len(scale) == 1 or not first <= n < stop:       # outside the body: one scale
            scale = max(scale)
        g.ops[n] = dataclasses.replace(op, attrs=_with_scale(op, scale))
        y = op.outputs[0]
        g.tensors[y] = dataclasses.replace(g.tensors[y], scale=scale)
        out[y] = scale
    return out


def least_error_scales(g: Graph, data: dict, samples: list[dict], headroom: float | None) -> dict[str, tuple]:
    """Set every cast's per-layer scale to the least-error one (module docstring) and
    return {cast output: scales}. The floor is headroom × the calibration amax / FP8_MAX,
    or with headroom None the cast's scale as built (experiments/fp8_scales: the static
    bounds as the floor). The samples are evaluated one after another, each with the
    casts at the scales chosen from the samples so far and itself (later layers see the
    earlier casts' chosen rounding)."""
    L = g.repeat.count if g.repeat else 1
    casts = [n for n, op in enumerate(g.ops) if op.kind == "cast"]
    sq = {n: np.zeros((L, STEPS)) for n in casts}       # squared error per layer and step
    amax = {n: np.zeros(L) for n in casts}
    built = {n: np.broadcast_to(np.asarray(g.ops[n].attr("scale"), np.float64), (L,))   # headroom None's floor
             for n in casts} if headroom is None else {}

    def floor_of(n, i, top):
        return float(built[n][i]) if headroom is None else headroom * top / FP8_MAX or 1.0

    def scale_of(n, i):
        return _step_above(floor_of(n, i, amax[n][i]), int(np.argmin(sq[n][i])))

    def rewrite(n, op, i, env):
        if op.kind != "cast":
            return op
        v, w = _f16_histogram(env[op.inputs[0]])
        top = float(np.abs(v).max(initial=0.0))
        amax[n][i] = max(amax[n][i], top)
        for j in range(STEPS):
            s = _step_above(floor_of(n, i, top), j)
            q = np.clip(v / s, -FP8_MAX, FP8_MAX).astype(FP8).astype(np.float64) * s
            sq[n][i, j] += exact.fsum64(w * np.square(q - v))    # not BLAS's dot: it varies by CPU (issue #24)
        return dataclasses.replace(op, attrs=_with_scale(op, scale_of(n, i)))

    from .. import reference
    for inputs in samples:
        reference.evaluate(g, {**data, **inputs}, rewrite=rewrite)
    return _set_scales(g, {n: [scale_of(n, i) for i in range(L)] for n in casts})


def _step_above(floor: float, j: int) -> float:
    """The smallest 2^(k + j/STEPS), k an integer, that is >= floor."""
    return float(2.0 ** (np.ceil(np.log2(floor) - j / STEPS) + j / STEPS))


def _f16_histogram(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct finite values of an f16 activation (float64) and how often each occurs:
    at most 65,536 values to round per candidate scale instead of every element (exact:
    the cast's input is an f16 tensor, so its values are f16 whatever array holds them)."""
    h = np.asarray(x).astype(np.float16)
    counts = np.bincount(h.view(np.uint16).ravel(), minlength=1 << 16)
    bits = np.nonzero(counts)[0].astype(np.uint16)
    v = bits.view(np.float16).astype(np.float64)
    fin = np.isfinite(v)
    return v[fin], counts[bits[fin]].astype(np.float64)

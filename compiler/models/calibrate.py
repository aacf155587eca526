"""Offline calibration of FP8 activation scales (model.fp8_scales=calibrated, least_error),
the f16 fallback (model.fp8_fallback) and what the casts clip (the reference phase's figures).

Calibration inputs (calibration_inputs): for a tower, real photos: the first
`model.calibration` of photos.CALIBRATION, through the model's own eval transform, never
the trial's input nor a held-out photo (model.fp8_calibration=seeded: seeded uniform-noise
images instead, the scales before issue #23: fitted to noise, layer 0's attention-output
cast clipped real photos at up to 1.85x its range and the outputs erred 4-10 % at 4 layers);
the encoder alone (no image) takes seeded tokens. The host evaluates the model as the device
runs it (the reference's ops, f16 rounding, the FP8 casts) on them, and takes each cast's
scale per layer from the largest |x| it meets there: scale_i = headroom · amax_i / FP8_MAX.
Each calibration input is evaluated with casts scaled by its own amax so far; the scales
kept are the largest over the inputs. The casts saturate, so an input whose activations
exceed headroom · amax clips there: calibration trades that risk for mantissa (e4m3 keeps
3 bits of mantissa only down to 2^-6 of 448; a scale far above the data pushes it into
subnormals and to zero). Costs 0 device cycles and one host evaluation of the model per
calibration input (two with centring).

least_error (least_error_scales): a floor only bounds the scale from below; where in a
binade the scale sits decides which values e4m3's grid holds exactly, and so the rounding
error (e4m3's relative grid repeats every binade, so a scale and twice it err alike but for
subnormals and saturation). Each cast's scale per layer is 2^(k + j/STEPS): j the step whose
rounding of the cast's inputs errs least (squared error summed over the calibration inputs),
k the smallest integer with the scale >= headroom · amax / FP8_MAX over them (so it clips
like `calibrated`). The f16 histogram (_f16_histogram) makes the search cost one pass over
each cast input. (Its gain over the static bounds, measured on noise images only:
experiments/fp8_scales/README.md.)

Fallback (least_error's `errors`, keep_in_f16): e4m3 errs by ~2.6 % of each value, so a cast
whose input is mostly a part common to every token (the attention output: its rows are
convex combinations of V's rows, and on a photo's smooth regions nearly equal) rounds that
common part and leaves an error large against what differs between tokens, which is what the
next layers and the head read. The calibration pass measures, per cast, the rms rounding error
at the chosen scales over the rms of the input less each image's per-channel mean over its real
rows (token_energy; over every layer and calibration input); a cast over
model.fp8_fallback_error (0.15) is taken out and its matmul reads the f16 input (FP16 x FP8,
at the f16 rate, which the planner prices). On the 6 photos, So400m, 4 layers: attention
output 0.249, GELU 0.066, LayerNorm outputs 0.038 / 0.046 (centred); 27 layers: 0.678, 0.102,
0.060 / 0.067. 0.15 is the log-midpoint of the gap between 0.102 and 0.249 (assumed;
calibration figures only): the attention output, and only it, stays f16. Alone it was 3.5 ->
0.8 % of the embedding's error on `moon` at 4 layers (experiments/fp8_scales/README.md).

Clipping (clipping): per cast and layer, the fraction of the real rows' elements over the
cast's range and the largest |x| / range, on any input: the reference phase reports them
for the trial's input (reference.fp8_clipped_max, fp8_peak_max, fp8_clipped.<cast>)."""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import exact
from ..ir import Graph, Op
from . import photos
from .gemm import FP8, FP8_MAX
from .image import MEAN, STD

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


def least_error_scales(g: Graph, data: dict, samples: list[dict], headroom: float | None,
                       errors: dict | None = None) -> dict[str, tuple]:
    """Set every cast's per-layer scale to the least-error one (module docstring) and
    return {cast output: scales}. The floor is headroom × the calibration amax / FP8_MAX,
    or with headroom None the cast's scale as built (experiments/fp8_scales: the static
    bounds as the floor). The samples are evaluated one after another, each with the
    casts at the scales chosen from the samples so far and itself (later layers see the
    earlier casts' chosen rounding). `errors`, if given, receives {cast input: the rms
    rounding error at the chosen scales, over every layer and sample, relative to the rms
    of the input's token-to-token part} (token_error: what model.fp8_fallback reads)."""
    L = g.repeat.count if g.repeat else 1
    casts = [n for n, op in enumerate(g.ops) if op.kind == "cast"]
    sq = {n: np.zeros((L, STEPS)) for n in casts}       # squared error per layer and step
    amax = {n: np.zeros(L) for n in casts}
    varying = {n: np.zeros(L) for n in casts}           # energy of the token-to-token part
    built = {n: np.broadcast_to(np.asarray(g.ops[n].attr("scale"), np.float64), (L,))   # headroom None's floor
             for n in casts} if headroom is None else {}
    from ..compare import images, real_rows
    keep = {n: real_rows(g, g.ops[n].inputs[0]) for n in casts}

    def floor_of(n, i, top):
        return float(built[n][i]) if headroom is None else headroom * top / FP8_MAX or 1.0

    def scale_of(n, i):
        return _step_above(floor_of(n, i, amax[n][i]), int(np.argmin(sq[n][i])))

    def rewrite(n, op, i, env):
        if op.kind != "cast":
            return op
        x = env[op.inputs[0]]
        v, w = _f16_histogram(x)
        top = float(np.abs(v).max(initial=0.0))
        amax[n][i] = max(amax[n][i], top)
        for j in range(STEPS):
            s = _step_above(floor_of(n, i, top), j)
            q = np.clip(v / s, -FP8_MAX, FP8_MAX).astype(FP8).astype(np.float64) * s
            sq[n][i, j] += exact.fsum64(w * np.square(q - v))    # not BLAS's dot: it varies by CPU (issue #24)
        varying[n][i] += token_energy(x, keep[n], images(g))
        return dataclasses.replace(op, attrs=_with_scale(op, scale_of(n, i)))

    from .. import reference
    for inputs in samples:
        reference.evaluate(g, {**data, **inputs}, rewrite=rewrite)
    if errors is not None:
        for n in casts:
            chosen = sq[n][np.arange(L), np.argmin(sq[n], axis=1)].sum()
            errors[g.ops[n].inputs[0]] = float(np.sqrt(chosen / max(varying[n].sum(), 1e-300)))
    return _set_scales(g, {n: [scale_of(n, i) for i in range(L)] for n in casts})


def token_energy(x: np.ndarray, keep: np.ndarray, images: int) -> float:
    """The energy of x's token-to-token part: each image's real rows (`keep`) less that
    image's per-channel mean. Per image, not over the batch: B images differ from one
    another by far more than one image's tokens do, and counting that difference made the
    attention output's rounding look small beside it (0.043 at B = 6 against 0.638 alone,
    27 layers), so a batch kept no cast in f16 and erred 3.2 % (experiments/throughput)."""
    x = np.asarray(x, np.float64)
    parts = []
    for rows, k in zip(np.split(x, images), np.split(np.asarray(keep), images)):
        r = rows[k]
        parts.append(exact.fsum64(np.square(r - r.mean(0)).ravel()))
    return float(exact.fsum64(np.asarray(parts)))


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


def photo_pixels(name: str, size: int, crop_pct: float, mean, std, interpolation: str = "bicubic") -> np.ndarray:
    """[3, size, size] float32: bundled photo `name` (photos.py) through the model's own eval
    transform (image.load_image of `photo:NAME`), exactly as the trial's input would be."""
    from .image import load_image
    return load_image(photos.PREFIX + name, size, crop_pct, mean, std, interpolation)


def calibration_inputs(c, d: dict, T: int, B: int) -> list[dict]:
    """The calibration inputs, shaped as the trial's input, never the trial's input:
    a tower (model.fp8_calibration=photos, the default) takes the first `model.calibration`
    photos of photos.CALIBRATION (never a held-out one), B to an input (the last input's
    free slots repeat its first photos); fp8_calibration=seeded (and the encoder alone,
    which has no image) takes `model.calibration` seeded inputs of a seed stream of their
    own (uniform pixels in the normalised range, or N(0, 1) tokens)."""
    from .image import load_batch
    seeded = not c.tower or c.fp8_calibration == "seeded"
    mean, std = d.get("mean", MEAN), d.get("std", STD)
    if not seeded:
        names = photos.CALIBRATION[:c.calibration]
        groups = [names[j:j + B] for j in range(0, len(names), B)]
        groups = [(g * B)[:B] for g in groups]
    out = []
    for j in range(c.calibration if seeded else len(groups)):
        rng = np.random.default_rng([c.seed, 0xCA1, j])
        if not c.tower:
            x = np.zeros((T, d["width"]), np.float16)
            x[:d["tokens"]] = rng.standard_normal((d["tokens"], d["width"]))
            out.append({"x": x})
            continue
        crop = d.get("crop_pct", 1.0)
        if seeded:
            out.append(tower_input(load_batch("", B, d["image"], crop, mean, std, rng), d, T))
        else:
            out.append(tower_input([photo_pixels(n, d["image"], crop, mean, std, d.get("interpolation") or "bicubic")
                                     for n in groups[j]], d, T))
    return out


def tower_input(images: list, d: dict, T: int) -> dict:
    """{"pixels": f16 [B·T, 3·P·P]}: images [3, S, S] as the tower's input rows (image b's
    patches at rows b·T + the class token's row, as vit.patch_embedding lays them out)."""
    from .image import patch_rows
    cls, P = int(d["pool"] == "token"), d["patch"]
    pix = np.zeros((len(images) * T, 3 * P * P), np.float16)
    for b, im in enumerate(images):
        rows = patch_rows(im, P)
        pix[b * T + cls:b * T + cls + len(rows)] = rows
    return {"pixels": pix}


def clipping(g: Graph, data: dict, inputs: dict | None = None) -> tuple[dict, dict]:
    """What the casts clip on `data` (with `inputs` in place of the trial's): per cast input
    name, "clipped": float64 [count] the fraction of its real rows' elements (per Repeat
    iteration) whose |x| exceeds the cast's range 448 · scale, which the saturating cast
    clips to it, and "peak": float64 [count] the largest |x| / (448 · scale) (> 1: clipped).
    One host evaluation of the graph as the device runs it (FP8 casts included); returns
    those figures and the graph's outputs (f16) of that evaluation."""
    from .. import reference
    from ..compare import real_rows
    L = g.repeat.count if g.repeat else 1
    out = {op.inputs[0]: {"clipped": np.zeros(L), "peak": np.zeros(L)} for op in g.ops if op.kind == "cast"}

    def look(n, op, i, env):
        if op.kind == "cast":
            x = np.abs(env[op.inputs[0]][real_rows(g, op.inputs[0])]) / op.attr("scale")
            out[op.inputs[0]]["clipped"][i] = np.count_nonzero(x > FP8_MAX) / max(x.size, 1)
            out[op.inputs[0]]["peak"][i] = float(x.max(initial=0.0)) / FP8_MAX
        return op

    env = reference.evaluate(g, {**data, **(inputs or {})}, keep={t.name for t in g.of_kind("output")}, rewrite=look)
    return out, reference.outputs(g, env)


def keep_in_f16(g: Graph, inputs: list[str]) -> Graph:
    """g with the casts of `inputs` (cast input names) taken out: their readers read the f16
    input instead, so those matmuls run FP16 x FP8 (the planner prices the f16 rate); the
    Repeat's body range shifted to match."""
    gone = {j for j, op in enumerate(g.ops) if op.kind == "cast" and op.inputs[0] in inputs}
    src = {g.ops[j].outputs[0]: g.ops[j].inputs[0] for j in gone}
    ops = [dataclasses.replace(op, inputs=tuple(src.get(n, n) for n in op.inputs))
           for j, op in enumerate(g.ops) if j not in gone]
    rep = g.repeat
    if rep:
        before = lambda k: k - sum(j < k for j in gone)
        rep = dataclasses.replace(rep, first=before(rep.first), stop=before(rep.stop) if rep.stop else 0)
    return dataclasses.replace(g, ops=ops, repeat=rep, tensors={n: t for n, t in g.tensors.items() if n not in src})

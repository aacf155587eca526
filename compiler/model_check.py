"""The third check of a tower trial (DESIGN.md §7a): the device's outputs against the
independent model (compiler/timm_model.py, timm's forward in float64, sharing no code
with the graph), fed the weights the model phase says it runs (models/export.py) and the
pixels the device received.

Where: the independent model runs in the reference phase (host only; it already
evaluates the graph there, and the ~100 GFLOP of a 4-layer So400m tower would double the
run stage's host time); the run phase only compares (`check`, milliseconds) and
`validated` requires it. Its outputs are stored float32 (what the check compares with;
libm's last bits cannot reach a stored byte through the rounding), its figures rounded to
`DIGITS` significant digits.

The bound, from the precisions (not from measured errors): the exported weights are the
device's own, so only activations differ. Each rounding of a value to a format with unit
roundoff u errs by a uniform fraction of u relative, rms u/√3; summed in quadrature over
the roundings on the path to the output (independent, and assumed neither damped nor
amplified by the layers). FP16 (u = 2^-11): every op output rounded once, a Linear twice
(product and bias): 16 per encoder layer (norm1, qkv 2, scores, softmax, ·v, proj 2, add,
norm2, fc1 2, GELU, fc2 2, add), 3 for the patch embedding (product, bias, + positions),
1 for the final norm, then 16 for the MAP head (q 2, kv 2, scores, softmax, ·v, proj 2,
norm, fc1 2, GELU, fc2 2, add) or 2 for the class token's Linear. FP8 activations add
e4m3 roundings (u = 2^-4) at the 4 matmul inputs of each layer. At 4 So400m layers: FP16
0.23 % (features) / 0.26 % (embedding), measured 0.10 % / 0.07 %; FP8 14.4 %, measured
4.2 % / 1.1 % (experiments/timm_check/README.md). The FP8 bound is loose by design: it
takes every cast's error as reaching the output whole, where the residual stream dilutes
it; it still fails what clips or mis-scales a cast (errors of order 1)."""
from __future__ import annotations

import math

import numpy as np

from . import timm_model
from .models.export import META, TimmState, image_pixels

DIGITS = 4
U16, U8 = 2.0 ** -11, 2.0 ** -4          # unit roundoff: f16 (10 mantissa bits), e4m3 (3)
PER_LAYER_F16, PER_LAYER_FP8 = 16, 4
EMBED_F16, FEATURES_F16 = 3, 1
HEAD_F16 = {"map": 16, "token": 2}


def sig(x: float, digits: int = DIGITS) -> float:
    """x rounded to `digits` significant digits (what the metrics store)."""
    if not math.isfinite(x) or x == 0:
        return float(x)
    return float(f"{x:.{digits - 1}e}")


def applies(g) -> bool:
    return META in getattr(g, "meta", {})


def head_name(g) -> str:
    return "logits" if g.meta[META]["pool"] == "token" else "embedding"


def model_outputs(g, data: dict) -> dict | None:
    """The independent model's outputs, float32, shaped as the graph's outputs (padding
    rows zero); None when the model is not a tower with a timm counterpart."""
    if not applies(g):
        return None
    a = g.meta[META]
    arch = arch_of(a)
    sd = TimmState(g, data)
    B, T0 = a["batch"], a["tokens"]
    T = g.tensors["features"].shape[0] // B
    head = head_name(g)
    out = {"features": np.zeros(g.tensors["features"].shape, np.float32),
           head: np.zeros(g.tensors[head].shape, np.float32)}
    for b in range(B):
        r = timm_model.forward(sd, image_pixels(g, data, b), arch)
        out["features"][b * T:b * T + T0] = r["features"]
        out[head][b] = r[head][0]
    return out


def arch_of(a: dict) -> timm_model.Arch:
    """The independent model's architecture: shapes from the config; for a named preset,
    timm's eps and GELU (timm_model.TIMM), for a custom tower the config's."""
    fixed = timm_model.TIMM.get(a.get("preset"), dict(eps=a["eps"], gelu=a["gelu"]))
    return timm_model.Arch(heads=a["heads"], depth=a["depth"], pool=a["pool"], patch=a["patch"], **fixed)


def bound(g, name: str) -> float:
    """The rms relative error allowed for output `name` (module docstring)."""
    a = g.meta[META]
    n16 = EMBED_F16 + PER_LAYER_F16 * a["depth"] + FEATURES_F16
    if name != "features":
        n16 += HEAD_F16[a["pool"]]
    n8 = PER_LAYER_FP8 * a["depth"] if a["fp8_activations"] else 0
    return math.sqrt(n16 * U16 ** 2 / 3 + n8 * U8 ** 2 / 3)


def real_rows(g, name: str) -> np.ndarray:
    a = g.meta[META]
    rows = g.tensors[name].shape[0]
    if name != "features":
        return np.ones(rows, bool)
    T = rows // a["batch"]
    return np.arange(rows) % T < a["tokens"]


def check(g, device: dict, model: dict) -> dict:
    """Per output: rms relative error and cosine of the device's against the model's over
    real rows, the bound, and `ok`; plus the worst figures and, when it fails, `failed`:
    one line naming "model" and the figures."""
    figs, bad = {}, []
    for name in sorted(model):
        keep = real_rows(g, name)
        got = np.asarray(device[name], np.float64)[keep].ravel()
        want = np.asarray(model[name], np.float64)[keep].ravel()
        finite = bool(np.isfinite(got).all())
        # correctly rounded sums (math.fsum): no BLAS or SIMD order reaches a stored figure
        ww = math.fsum(want * want)
        rms = math.sqrt(math.fsum((got - want) ** 2) / ww) if finite else float("inf")
        cos = math.fsum(got * want) / math.sqrt(math.fsum(got * got) * ww) if finite else float("nan")
        b = bound(g, name)
        ok = finite and rms <= b
        figs[name] = {"rms_rel_error": sig(rms), "cosine": sig(cos, 6), "bound": sig(b), "ok": ok}
        if not ok:
            bad.append(f"{name} rms {sig(rms):.4g} > bound {sig(b):.4g} (cosine {sig(cos, 6):.6g})")
    res = {"outputs": figs, "ok": not bad,
           "rms_rel_error": max(f["rms_rel_error"] for f in figs.values()),
           "cosine": min(f["cosine"] for f in figs.values())}
    if bad:
        res["failed"] = "model: the device's output differs from the independent timm model: " + "; ".join(bad)
    return res

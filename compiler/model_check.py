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
e4m3 roundings (u = 2^-4) at each FP8 activation a layer's matmuls read (fp8_roundings:
QKV's, proj's, fc1's and fc2's inputs, and q and k with model.fp8_scores). At 4 So400m layers: FP16
0.23 % (features) / 0.26 % (embedding), measured 0.10 % / 0.07 %; FP8 14.4 %, measured
4.2 % / 1.1 % (experiments/timm_check/README.md). The FP8 bound is loose by design: it
takes every cast's error as reaching the output whole, where the residual stream dilutes
it; it still fails what clips or mis-scales a cast (errors of order 1).

That a-priori bound is several times the measured error, so it passed model-definition bugs
whose effect is of the order of the rounding (GELU's tanh form, a missing position table,
LayerNorm's eps, a zero MAP latent; experiments/planted), and with FP8 activations the
device's FP8 error buried every one. So the check (three levels of correct: per op, graph, model)
compares the graph's FP16-activation evaluation -- the reference's two (f16-rounded and
unrounded), or with FP8 activations the same graph without its casts on the device's own
parameters (not `fp16_outputs`, whose parameters are as given before centering's folds: it
lies ~6e-4 from the model on the tiny tower, half its rounding noise) -- with the model:
  - the rounded evaluation within MARGIN times its measured f16 rounding noise (the rms
    relative difference from the unrounded evaluation of the same graph, output by output),
    at least MARGIN times one rounding (FLOOR), at most the a-priori FP16 bound above. A
    correct graph's rounded evaluation lies from the model by its own noise (ratio 1.000
    measured), a bug adds its own difference in quadrature;
  - the unrounded evaluation within UNROUNDED times that noise: f32 against f64 only
    (measured <= 2.4e-4 of the noise clean; GELU's tanh form reaches 0.18, an error below
    the f16 noise that the rounded figure cannot show);
  - the weights the device holds against their source (`weights_check`): the model runs on
    the device's weights, so a table never loaded passes it by construction.
Figures: experiments/model_margin (measure.py, README). The device is held to the
FP16-activation evaluation by the other checks: end to end (FP16), and with FP8 activations
the FP8 accuracy budget (run.fp8_accuracy: the device against `fp16_outputs`, per output,
within policy.fp8_budget_embedding / fp8_budget_features)."""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import exact, timm_model
from .models.export import META, TimmState, image_pixels

DIGITS = 4
U16, U8 = 2.0 ** -11, 2.0 ** -4          # unit roundoff: f16 (10 mantissa bits), e4m3 (3)
PER_LAYER_F16 = 16
EMBED_F16, FEATURES_F16 = 3, 1
HEAD_F16 = {"map": 16, "token": 2}
MARGIN = 1.5           # on the measured rounding noise (module docstring; experiments/model_margin)
FLOOR = U16 / math.sqrt(3)    # one f16 rounding's rms relative error: the noise is at least that
UNROUNDED = 1 / 32     # the unrounded evaluation against the model: a fraction of the f16 noise (f32 vs f64 only)
WEIGHT_BOUND = 0.1     # a weight tensor the device holds vs its source: rms relative (e4m3: <= 2^-4/sqrt(3) = 3.6 %)


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


def outputs_and_weights(g, data: dict) -> tuple[dict | None, dict | None]:
    """(model_outputs, weights_check) of a tower, (None, None) otherwise. The weights check
    (one thread, ~7 s at 27 So400m layers) runs on a thread of its own beside the forward,
    whose two threads leave a core idle about a quarter of the time; nothing either computes
    depends on the other."""
    if not applies(g):
        return None, None
    with ThreadPoolExecutor(1) as side:
        weights = side.submit(weights_check, g, data)
        return model_outputs(g, data), weights.result()


def arch_of(a: dict) -> timm_model.Arch:
    """The independent model's architecture: shapes from the config; for a named preset,
    timm's eps and GELU (timm_model.TIMM), for a custom tower the config's."""
    fixed = timm_model.TIMM.get(a.get("preset"), dict(eps=a["eps"], gelu=a["gelu"]))
    return timm_model.Arch(heads=a["heads"], depth=a["depth"], pool=a["pool"], patch=a["patch"], **fixed)


def bound(g, name: str, fp8: bool | None = None) -> float:
    """The a-priori rms relative error of output `name` (module docstring); `fp8`: with FP8
    activations (None: the graph's own mode)."""
    a = g.meta[META]
    n16 = EMBED_F16 + PER_LAYER_F16 * a["depth"] + FEATURES_F16
    if name != "features":
        n16 += HEAD_F16[a["pool"]]
    fp8 = a["fp8_activations"] if fp8 is None else fp8
    n8 = fp8_roundings(g) * a["depth"] if fp8 else 0
    return math.sqrt(n16 * U16 ** 2 / 3 + n8 * U8 ** 2 / 3)


def fp8_roundings(g) -> int:
    """e4m3 roundings on a layer's path: the FP8 activation operands its matmuls read (q and
    k both from one cast count twice); with FP16 activations the four a layer would cast."""
    first, stop = g.body()
    fp8 = {t.name for t in g.tensors.values() if t.dtype == "fp8" and t.kind == "act"}
    n = sum(x in fp8 for op in g.ops[first:stop] if op.kind == "matmul" for x in op.inputs)
    return n or 4


def data_bound(g, name: str, noise: float) -> float:
    """The bound on the rounded evaluation of output `name`: MARGIN x its measured rounding
    noise, floored at MARGIN x one rounding, at most the a-priori FP16 bound."""
    return min(bound(g, name, fp8=False), MARGIN * max(noise, FLOOR))


def _sum(x) -> float:
    """A float64 sum in one fixed order (exact.fsum64: first to last, compiled, no fastmath),
    so no BLAS or SIMD order reaches a stored figure. Not math.fsum: at 27 layers the
    weights check sums ~0.8 G squares, ~80 s through Python floats, ~1 s here; the
    order's rounding (<= n u relative, ~5e-10 for a 4.9 M-element weight) is far below the
    digits stored (sig)."""
    return float(exact.fsum64(np.ascontiguousarray(x, np.float64).ravel()))


def _rms_rel(got, want) -> float:
    """rms(got - want) / rms(want), float64; inf when got is not finite."""
    got, want = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    if not np.isfinite(got).all():
        return float("inf")
    ww, dd = exact.sq_sums(got, want)         # _sum(want * want), _sum((got - want) ** 2) in one pass
    return math.sqrt(dd / ww) if ww > 0 else 0.0


def _cosine(got, want) -> float:
    got, want = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    if not np.isfinite(got).all():
        return float("nan")
    return _sum(got * want) / math.sqrt(_sum(got * got) * _sum(want * want))


def fp16_evaluations(g, data: dict, rounded: dict | None = None, unrounded: dict | None = None) -> tuple[dict, dict]:
    """The graph's FP16-activation evaluation, f16-rounded and unrounded (f32) outputs: given
    (the reference's two) for a graph without casts; with FP8 activations, the same graph
    with its casts taken out (compare.without_casts), on the device's own parameters (any
    host-side folding keeps the function, and the independent model is fed the same)."""
    if rounded is not None and unrounded is not None:
        return rounded, unrounded
    from . import reference
    from .compare import without_casts
    h = without_casts(g)
    keep = {t.name for t in h.of_kind("output")}
    return tuple({n: np.asarray(e[n], dt) for n in sorted(keep)} for e, dt in
                 ((reference.evaluate(h, data, True, keep), np.float16),
                  (reference.evaluate(h, data, False, keep), np.float32)))


def figures(g, rounded: dict, unrounded: dict, model: dict) -> dict:
    """Per output, over real rows: the rounded evaluation's rms relative error and cosine
    against the model, the unrounded one's rms relative error, and the rounding noise
    (rounded against unrounded). Rounded to DIGITS: what the reference result stores."""
    out = {}
    for n in sorted(model):
        k = real_rows(g, n)
        r, u, m = (np.asarray(x[n])[k] for x in (rounded, unrounded, model))
        out[n] = {"rms_rel_error": sig(_rms_rel(r, m)), "cosine": sig(_cosine(r, m), 6),
                  "unrounded_rms_rel_error": sig(_rms_rel(u, m)), "noise": sig(_rms_rel(r, u))}
    return out


def source_weights(g):
    """The weights the model is defined with, under timm's names: the config's file, or
    the seeded tensors the model phase drew (models/vit_weights.py, lazily per tensor)."""
    from .models import vit_weights as vw
    a = g.meta[META]
    dims = dict(width=a["width"], hidden=a["hidden"], patch=a["patch"], tokens=a["tokens"], pool=a["pool"])
    shapes = vw.block_shapes(a["depth"], a["width"], a["hidden"]) | vw.tower_shapes(dims, a["classes"])
    if a["weights"]:
        return vw.load_weights(a["weights"], shapes)[0]
    return vw.seeded_weights(a["seed"], a["depth"], a["width"], a["hidden"], shapes)


def weights_check(g, data: dict) -> dict:
    """The weights the device holds (models/export.py: dequantized, under timm's names,
    the parameters as given before any function-preserving host fold) against their
    source, tensor by tensor: the worst rms relative error. The independent model runs on
    the device's weights (so only activations differ); this is what holds those to the
    model's definition (a position table or a MAP latent never loaded fails here)."""
    from .compare import ORIGINAL
    given = {n[len(ORIGINAL):]: v for n, v in data.items() if n.startswith(ORIGINAL)}
    held, src = TimmState(g, {**data, **given}), source_weights(g)
    worst, name = 0.0, ""
    for key in sorted(held):
        if key == "cls_token":           # the class token's row folds cls_token, pos_embed[0], bias (export.py)
            continue
        if key not in src:               # a parameter the model does not define
            worst, name = float("inf"), f"{key} (not in the model)"
            continue
        got, want = held[key], np.asarray(src[key], np.float64)
        if key == "pos_embed" and g.meta[META]["pool"] == "token":
            got, want = got[:, 1:], want[:, 1:]
        if got.ndim == 2 and got.T.flags.c_contiguous:    # a Linear weight, held in×out (export.py):
            got, want = got.T, want.T                      # compared in that order, without a copy
        e = _rms_rel(got, want)
        if not e <= worst:
            worst, name = e, key
    missing = sorted(set(src) - set(held) - {"cls_token"})
    if missing:                          # a weight the model defines and the device never holds
        worst, name = float("inf"), f"{missing[0]} (not held)"
    return {"tensors": len(held), "worst": name, "rms_rel_error": sig(worst), "bound": WEIGHT_BOUND}


def real_rows(g, name: str) -> np.ndarray:
    a = g.meta[META]
    rows = g.tensors[name].shape[0]
    if name != "features":
        return np.ones(rows, bool)
    T = rows // a["batch"]
    return np.arange(rows) % T < a["tokens"]


def check(g, figs: dict, weights: dict | None = None) -> dict:
    """`figures` against the bounds: per output the rounded evaluation within
    data_bound(noise) of the model and the unrounded one within UNROUNDED x noise, `ok`;
    `weights` (weights_check) within WEIGHT_BOUND; plus the worst figures and, when it
    fails, `failed`: one line naming "model" and the figures."""
    out, bad = {}, []
    for name in sorted(figs):
        f = figs[name]
        b, bu = sig(data_bound(g, name, f["noise"])), sig(UNROUNDED * max(f["noise"], FLOOR))
        ok = f["rms_rel_error"] <= b and f["unrounded_rms_rel_error"] <= bu
        out[name] = {**f, "bound": b, "unrounded_bound": bu, "ok": ok}
        if not ok:
            bad.append(f"{name} rms {f['rms_rel_error']:.4g} (bound {b:.4g} = {MARGIN} x noise {f['noise']:.4g}), "
                       f"unrounded {f['unrounded_rms_rel_error']:.4g} (bound {bu:.4g}), cosine {f['cosine']:.6g}")
    if weights is not None and not weights["rms_rel_error"] <= weights["bound"]:
        bad.append(f"weight {weights['worst']} rms {weights['rms_rel_error']:.4g} from its source "
                   f"(bound {weights['bound']:.4g})")
    res = {"outputs": out, "ok": not bad, **({"weights": weights} if weights is not None else {}),
           "rms_rel_error": max((f["rms_rel_error"] for f in out.values()), default=0.0),
           "cosine": min((f["cosine"] for f in out.values()), default=1.0)}
    if bad:
        res["failed"] = ("model: the graph's FP16-activation evaluation or weights differ from the timm model's: "
                         + "; ".join(bad))
    return res

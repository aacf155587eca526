"""One op's reference and error bound, for the read-back checks (compiler/readback.py):
op_error(op, inputs, device output) -> (reference, bound, error).

Bounds (u = 2^-11, f16's unit roundoff; e = 2^-24, f32's; t = 2^-25, half the
smallest f16 subnormal; ulp = f16's spacing at the reference value):
  matmul      (3u + (2k+8)e) * sum|a||b| * |scale| + (k+1)t: the device's products exact
              in f32, summed in f32 (k e), k-split partials rounded to f16 (u; to f32
              with policy.f32_partials, within the e terms), their f32 sum rounded once
              (u), one u to spare; the reference is computed in f32 too
              (inputs rounded to f32, k-term f32 sums: another (k+2)e). Each f16 rounding
              of a subnormal errs by up to t absolute, which no relative term covers:
              at most k partials (a k-split slice may hold one k) and the sum.
  add, bias   ulp: the f32 sum of two f16 values rounded once (half an ulp; f32 slack).
  cast        exact: the device value must be the e4m3 rounding of x/scale, allowing
              either neighbour only where x/scale lies within 2^-20 (relative) of a
              rounding midpoint (the device divides in f32).
  gelu        ulp + (16 + 8|x| + |x|^3) e |ref| + t: f32 evaluation, whose exp argument
              (~1.6(|x| + 0.045|x|^3)) carries a relative error of e per unit.
  layernorm   ulp + (D+8) e |gamma| (|z| + rstd mean|x| (1 + |z|)) + e|beta| + t: the
              f32 mean of D terms errs by D e mean|x|, shifting z by rstd times that and
              the variance (so rstd) relatively by as much; the rest few e.
  softmax     ulp + ref ((n+8) e + 4e (|s| + 2 max|s|)) + t, s = x*scale over the n valid
              columns: f32 scaling and exp arguments (e|s| each), an n-term sum, a divide.
              Attr `deferred` (policy.deferred_norm: exp(s - max) alone): 8e for (n+8)e.
  matmul with attr `normalise` (p·v of a deferred softmax, rows divided by a's row sums S):
              (matmul's bound + (u + (k+8)e) sum|a||b|) / S + t: the device rounds the sum
              to f16, multiplies by its f32 1/S (an f32 sum of k terms) and rounds again.
  flash_attention  (expm1(2D_i) + 8u) (P|V|) + ulp + t per row i: a score perturbed by at
              most D_i = (3u + (d+4)e) max_j sum|q||k| scale + u max_j|s| changes each
              softmax weight by a factor within exp(+-2 D_i); every stored intermediate
              (partial outputs, merged sums) rounds to f16 a few times (8u).
Other op kinds are counted as unchecked.
"""
from __future__ import annotations

import numpy as np

from . import exact, reference, reference_ops
from .models.gemm import FP8, FP8_MAX

U, E, TINY = 2.0 ** -11, 2.0 ** -24, 2.0 ** -25
ROWS = 1024     # row block of the softmax bound's ulp term (its temporaries were the run stage's peak)


def ulp16(x: np.ndarray) -> np.ndarray:
    """f16's spacing at |x| (subnormal spacing 2^-24 near 0)."""
    ex = np.frexp(x)[1]                                   # in place below: these are the run
    ex[x == 0] = -13                                      # stage's largest temporaries (frexp(0) = (0, 0))
    ex -= 11
    out = np.ldexp(1.0, ex)
    return np.maximum(out, 2.0 ** -24, out=out)


def _matmul(op, x, _):
    """In f32 (BLAS at twice the f64 rate): rounding the inputs to f32 and summing k
    products in f32 err by at most (k+2)e sum|a||b| more, which the bound adds."""
    a, b = (v.astype(np.float32, copy=False) for v in x)
    ref = reference_ops.matmul(op, a, b)
    s = reference_ops.matmul(op, np.abs(a), np.abs(b))
    np.abs(s, out=s)
    k = op.attr("k")
    sa = s.copy() if op.attr("normalise") else None
    s *= (3 * U + (2 * k + 8) * E) * (1 + (k + 2) * E)    # last factor: s itself summed in f32
    s += (k + 1) * TINY                                   # subnormal roundings: k partials, the sum
    if sa is not None:    # p·v of a deferred softmax: that sum (rounded to f16) times the f32 1/rowsum
        # (an f32 sum of k terms: k e), rounded once more (u); then divided by the reference's sum
        sa *= U + (k + 8) * E
        sa += s
        return reference_ops.row_normalised(op, ref, a), reference_ops.row_normalised(op, sa, a) + TINY
    return ref, s


def _sum(op, x, _):
    ref = x[0] + x[1]
    return ref, ulp16(ref)


def _gelu(op, x, _):
    ref = reference_ops.gelu(x[0], op.attr("approx", "tanh"))
    ax = np.abs(x[0])
    return ref, ulp16(ref) + (16 + 8 * ax + ax * ax * ax) * E * np.abs(ref) + TINY   # (** 3 is libm's pow)


def _layernorm(op, x, _):
    v, gamma, beta = x
    D = v.shape[1]
    ref = reference_ops.layernorm(v, gamma, beta, op.attr("eps", 1e-6))
    mu = v.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(((v - mu) ** 2).mean(1, keepdims=True) + op.attr("eps", 1e-6))
    z = np.abs((v - mu) * rstd)
    shift = rstd * np.abs(v).mean(1, keepdims=True)
    return ref, ulp16(ref) + (D + 8) * E * np.abs(gamma) * (z + shift * (1 + z)) + E * np.abs(beta) + TINY


def _softmax(op, x, _):
    scale, valid, deferred = op.attr("scale", 1.0), op.attr("valid", 0), op.attr("deferred", False)
    ref = reference_ops.softmax(x[0], scale, valid, deferred=deferred)
    n = valid or x[0].shape[1]
    bound = np.full(ref.shape, TINY)            # the biggest tensors: bound built in place
    s = np.abs(x[0][:, :n], out=bound[:, :n])
    s *= abs(scale)
    s += 2 * s.max(1, keepdims=True)
    s *= 4 * E
    s += (8 if deferred else n + 8) * E          # deferred: no n-term sum, no divide
    s *= ref[:, :n]
    for r0 in range(0, len(s), ROWS):            # ulp16's temporaries a block of rows at a time
        s[r0:r0 + ROWS] += ulp16(ref[r0:r0 + ROWS, :n])
    s += TINY
    return ref, bound


def _flash(op, x, _):
    q, k, v = x
    ref = reference._op(op, x, lambda a: a)
    d, valid, scale = op.attr("head_dim"), op.attr("valid"), op.attr("scale")
    bound = ulp16(ref) + TINY
    for r, cq, ck, cv, c in reference.flash_groups(op):     # (image, head) groups
        # reference_ops.dot, not BLAS: these bounds decide op_error_ratio, a stored figure (issue #24)
        s = reference_ops.dot(q[r, cq], k[r, ck].T) * scale
        sa = reference_ops.dot(np.abs(q[r, cq]), np.abs(k[r, ck]).T) * abs(scale)
        n = valid or s.shape[1]
        D = (3 * U + (d + 4) * E) * sa[:, :n].max(1) + U * np.abs(s[:, :n]).max(1)
        p = reference_ops.softmax(s, 1.0, valid)
        # expm1(y) <= y e^y for y >= 0, e^y by exact.exp64 (numpy's exp and expm1 vary by CPU)
        bound[r, c] += (2 * D * exact.exp_array(2 * D) + 8 * U)[:, None] * reference_ops.dot(p, np.abs(v[r, cv]))
    return ref, bound


def _cast(op, x, dev):
    """Distance from the device value to the nearest admissible rounding (bound 0)."""
    scale = op.attr("scale")
    q = x[0] / scale
    cands = [np.clip(q * (1 + d), -FP8_MAX, FP8_MAX).astype(FP8).astype(np.float64) * scale
             for d in (0.0, -2.0 ** -20, 2.0 ** -20)]
    err = np.min([np.abs(dev - c) for c in cands], axis=0)
    return cands[0], np.zeros_like(err), err


BOUNDS = {"matmul": _matmul, "add": _sum, "bias": _sum, "gelu": _gelu, "layernorm": _layernorm,
          "softmax": _softmax, "flash_attention": _flash, "cast": _cast}


def op_error(op, inputs: list, dev: np.ndarray, keep_ref: bool = True):
    """(reference, bound, error) of one op given its inputs and the device's output.
    A non-finite value anywhere -- the device's output, or the reference made from a
    non-finite input -- is an infinite error: NaN compares false with any bound, so it
    must never reach `err > bound` as itself (a NaN in an op's input made its bound NaN
    and the op passed, issue #23). keep_ref=False: the error is computed in the
    reference's array (returned as None) and the `inputs` list is emptied once the bound
    is made -- the read-back's largest checks (a 27-layer tower's attention scores) set
    the run stage's peak RSS."""
    res = BOUNDS[op.kind](op, inputs, dev)
    if not keep_ref:
        inputs.clear()
    ref, bound = res[0], res[1]
    if len(res) > 2:                               # cast: its own distance (NaN if dev is)
        err = res[2]
        err[~np.isfinite(err)] = np.inf
        return ref, bound, err
    err = np.subtract(dev, ref, out=None if keep_ref else ref)
    np.abs(err, out=err)                           # NaN or inf where dev or ref is not finite
    err[~np.isfinite(err)] = np.inf
    return (ref if keep_ref else None), bound, err

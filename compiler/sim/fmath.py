"""The machine's f32 arithmetic for the vector kernels: pure numpy functions on
float32 arrays of shape [batch, rows, cols] (or [batch, nelem]). Every step is
an f32 numpy operation (no float64 anywhere), so a kernel's bytes depend only on
its inputs, never on how many tiles were batched together: reductions run over
the last (contiguous) axis, one row at a time.

The machine's exp is its own (`exp`): numpy's np.exp picks a SIMD variant per host CPU
(and libm's below AVX2), which changes last bits (issue #24: `NPY_DISABLE_CPU_FEATURES`
shows it); +, -, *, /, sqrt, rint and ldexp are exact IEEE operations on every host, and
numpy's elementwise loops never fuse them (no FMA), so these functions give the same bits
everywhere.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

f32 = np.float32
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
FP8_MAX = f32(448.0)

_INV_LN2 = f32(1.4426950408889634)
_LN2_HI = f32(0.693359375)              # 355/512: k * _LN2_HI is exact for |k| < 2**15
_LN2_LO = f32(-2.1219444005469057e-04)  # ln 2 - 355/512
_EXP_POLY = [f32(1 / 5040), f32(1 / 720), f32(1 / 120), f32(1 / 24), f32(1 / 6), f32(0.5), f32(1), f32(1)]


def exp(x: np.ndarray) -> np.ndarray:
    """e**x in f32 by f32 operations: x = k ln2 + r (Cody-Waite, |r| <= ln2/2), e**r by its
    Taylor polynomial to r**7 (truncation < 0.1 ulp), times 2**k (ldexp: exact, or one
    rounding to a subnormal). Past 88.8 inf, below -104 zero; NaN stays NaN. Within ~2 ulp
    of e**x (tests/sim/test_fmath_exp.py)."""
    x = np.asarray(x, f32)
    xc = np.clip(np.where(x == x, x, f32(0)), f32(-104), f32(89))
    k = np.rint(xc * _INV_LN2)
    r = (xc - k * _LN2_HI) - k * _LN2_LO
    p = _EXP_POLY[0]
    for c in _EXP_POLY[1:]:
        p = p * r + c
    with np.errstate(over="ignore", under="ignore"):
        y = np.ldexp(p, k.astype(np.int32))
    y = np.where(x > f32(88.8), f32(np.inf), np.where(x < f32(-104), f32(0), y))
    return np.where(x == x, y, x).astype(f32)


# erfc(z) for z >= 0 = t * exp(-z*z + P(t)), t = 1 / (1 + z/2): the Chebyshev fit
# of Numerical Recipes (erfcc), fractional error < 1.2e-7 for every z >= 0 -- a
# *relative* bound, so the far negative tail of the erf-form GELU stays accurate
# (Abramowitz-Stegun 7.1.26 bounds only the absolute error of erf).
_ERFC = [f32(c) for c in (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                          0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)]


def erfc_pos(z: np.ndarray) -> np.ndarray:
    """erfc(z) for z >= 0 (float32)."""
    t = f32(1) / (f32(1) + f32(0.5) * z)
    p = _ERFC[-1]
    for c in reversed(_ERFC[:-1]):
        p = c + t * p
    return t * exp(p - z * z)


def erf(x: np.ndarray) -> np.ndarray:
    """erf in f32 from erfc_pos (odd extension)."""
    x = np.asarray(x, f32)
    return np.copysign(f32(1) - erfc_pos(np.abs(x)), x)


def gelu(x: np.ndarray, erf_form: bool) -> np.ndarray:
    if erf_form:
        # 0.5 x (1 + erf(x / sqrt2)) = 0.5 x erfc(-x / sqrt2)
        z = x * f32(-0.7071067811865476)
        r = erfc_pos(np.abs(z))
        return f32(0.5) * x * np.where(z >= 0, r, f32(2) - r)
    # 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)): the same function without the
    # cancellation of 1 + tanh(u) for u << 0 (the negative tail keeps f16 accuracy)
    u2 = f32(-1.5957691216057308) * (x + f32(0.044715) * (x * x * x))
    with np.errstate(over="ignore"):
        return x / (f32(1) + exp(u2))


def layernorm(x, gamma, beta, eps):
    """x [B, rows, cols]; gamma, beta [B, 1, cols]; eps [B, 1, 1]. Two-pass
    statistics in f32, biased (population) variance, one rsqrt per row."""
    n = f32(x.shape[-1])
    mean = x.sum(-1, keepdims=True) / n
    d = x - mean
    var = (d * d).sum(-1, keepdims=True) / n
    rstd = f32(1) / np.sqrt(var + eps)
    return d * rstd * gamma + beta


def layernorm_stats(x):
    """x [B, rows, cols] -> f32 [B, rows, 2]: each row's mean and sum of squared
    deviations (two-pass), a row half's part of LAYERNORM F_LN_STATS."""
    mean = x.sum(-1, keepdims=True) / f32(x.shape[-1])
    d = x - mean
    return np.concatenate([mean, (d * d).sum(-1, keepdims=True)], -1)


def layernorm_half(x, gamma, beta, left, right, eps):
    """x [B, rows, c]: one half of rows 2c wide; left, right [B, rows, 2] the halves'
    (mean, M2) (layernorm_stats); gamma, beta [B, 1, c]; eps [B, 1, 1]. The whole row's
    mean and biased variance by Chan's pairwise combination of two equal halves (left then
    right, the same arithmetic on both tiles): mean = (m_l + m_r) / 2, M2 = M2_l + M2_r +
    (m_l - m_r)^2 c / 2; then normalised as layernorm."""
    c = f32(x.shape[-1])
    ml, mr = left[..., :1], right[..., :1]
    mean = (ml + mr) * f32(0.5)
    delta = ml - mr
    var = (left[..., 1:] + right[..., 1:] + delta * delta * (c * f32(0.5))) / (f32(2) * c)
    rstd = f32(1) / np.sqrt(var + eps)
    return (x - mean) * rstd * gamma + beta


def softmax(x, scale):
    """x [B, rows, cols], scale [B, 1, 1]: exp(s - rowmax s) / rowsum, s = x * scale."""
    e = unnormalised_softmax(x, scale)
    return e / e.sum(-1, keepdims=True)


def unnormalised_softmax(x, scale):
    """exp(s - rowmax s), s = x * scale: SOFTMAX's rows before the division (F_SM_DEFER)."""
    s = x * scale
    return exp(s - s.max(-1, keepdims=True))


def safe_max(m):
    """A running max of -inf (no finite score yet) enters exponents as 0, so
    exp(-inf - m') is 0 rather than NaN."""
    return np.where(m == -np.inf, f32(0), m)


def to_fp8(x: np.ndarray) -> np.ndarray:
    """float32 -> e4m3fn, round to nearest even, saturating: |x| > 448 becomes
    +-448 (inf included); NaN stays NaN."""
    return np.clip(x, -FP8_MAX, FP8_MAX).astype(FP8)

"""Arithmetic whose every bit is the same on every machine (issue #24; DESIGN.md §7a
"Determinism"): the reference's matmuls and transcendentals, the simulator's MATMUL, and the
stored figures' sums.

What can change a last bit between machines, and what this module does instead:
  * BLAS (OpenBLAS picks a kernel per CPU, OPENBLAS_CORETYPE, and splits work by thread
    count: another summation order, FMA or not). `matmul_f32` uses BLAS only where the
    order provably cannot matter: float32 operands are widened to float64, where every
    product a*b is exact (24 + 24 bits < 53); any order of summing k exact products errs by
    at most gamma_k * sum|a||b| (gamma_k = k u / (1 - k u), u = 2^-53; Higham, "Accuracy
    and Stability of Numerical Algorithms", 2nd ed., eq. 3.5), and sum|a||b| <= |a_i|_2
    |b_j|_2 (Cauchy-Schwarz). Where the interval [c - E, c + E] around BLAS's float64 sum c
    holds no float32 rounding boundary, float32(c) is float32(the exact sum), whatever
    BLAS did. Where it does hold one but every partial sum, in any order, is provably a
    float64 value (`_certify`: the products' common quantum times their absolute sum's
    bound fits 53 bits), c is the exact sum itself whatever BLAS did: no IEEE addition or FMA
    of it rounds (f16 operands' sums, often exact and a few bits wider than float32: ~9 %
    of the simulator's MATMUL elements at 4 So400m layers, all but 0.1 % of those settled
    here). Elsewhere (~0.05 % of the reference's elements: `experiments/determinism/README.md`) the
    element is summed again in a fixed order with compensation (Neumaier), whose much
    smaller bound settles all but the rarest, and those are summed exactly (math.fsum, with
    the one double-rounding case resolved by the exact residual's sign). So every element
    is the exact sum rounded once to float32 (+0 for a zero sum, one NaN for any NaN), the
    same bits for any BLAS kernel, thread count or CPU.
  * numpy's exp/tanh (SIMD variants per CPU: measured, `NPY_DISABLE_CPU_FEATURES=X86_V4`
    changes np.exp's float64 bits on this machine) and libm's erf (glibc's variants per
    CPU): `exp64`, `erfc64`, `gelu_erf64` are written here from +, -,
    *, / and comparisons only, in float64, in a fixed order.
  * numba: no `fastmath` anywhere, so LLVM neither reorders floating-point operations nor
    contracts a*b + c into an FMA (it does so only with the `contract` flag); a loop it
    vectorises computes each element by the same operations. So NUMBA_CPU_NAME=generic
    and the host's CPU give the same bits (tests/test_determinism.py runs both).
  * numpy's pairwise sums: `fsum64` sums in a fixed order instead (one compiled loop).

Accuracy (not needed for determinism, for the reference's error budget): exp64 and tanh64
within 2 float64 ulps (Cody-Waite reduction, degree-13 Taylor polynomial: truncation
< 2^-57; measured); erfc64 relative error < 2e-15 for
-6 < z < 12 (measured; piecewise Taylor series about 1/32-spaced centres, whose erfc values
come from the Maclaurin series or, past 1/2, the continued fraction);
tests/test_exact.py holds each against math.exp/erfc and matmul_f32 against
math.fsum, which share no code with them.

The file reads top-down: exp64; erfc table and gelu; fsum64; matmul_f32 (bound,
certification, compensated and exact fallbacks)."""
from __future__ import annotations

import math

import numpy as np
from .numba_probe import njit     # numba without its scipy.linalg probe

_JIT = dict(nogil=True, cache=True)     # never fastmath: see the module docstring

INV_LN2 = 1.4426950408889634
LN2_HI = 0.6931471803691238       # ln 2 split as in Cody & Waite: k * LN2_HI exact for |k| < 2^20
LN2_LO = 1.9082149292705877e-10


@njit(inline="always")
def _pow2(k):
    """2.0**k for integral -1022 <= k <= 1023, by its bits."""
    return np.int64((k + 1023) << 52).view(np.float64)


@njit(inline="always")
def exp64(x):
    """e**x in float64: x = k ln2 + r, |r| <= ln2/2, e**r by its Taylor polynomial to r**13,
    times 2**k as two exact factors 2**(k>>1) 2**(k - (k>>1)) (the first product is exact,
    the second rounds once where the result is subnormal). No branches (selects only), so
    loops of it vectorise; past 709.8 inf, below -745.2 zero, NaN stays NaN."""
    xc = x if x > -746.0 else -746.0               # NaN too: replaced below
    xc = xc if xc < 710.0 else 710.0
    k = math.floor(xc * INV_LN2 + 0.5)
    r = (xc - k * LN2_HI) - k * LN2_LO
    p = 1.6059043836821613e-10                  # 1/13!
    p = p * r + 2.08767569878681e-09            # 1/12!
    p = p * r + 2.505210838544172e-08
    p = p * r + 2.755731922398589e-07
    p = p * r + 2.7557319223985893e-06
    p = p * r + 2.48015873015873e-05
    p = p * r + 0.0001984126984126984
    p = p * r + 0.001388888888888889
    p = p * r + 0.008333333333333333
    p = p * r + 0.041666666666666664
    p = p * r + 0.16666666666666666
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    ki = np.int64(k)
    k1 = ki >> 1
    y = p * _pow2(k1) * _pow2(ki - k1)
    y = np.inf if x > 709.8 else y
    y = 0.0 if x < -745.2 else y
    return x if x != x else y


# ---- erfc: piecewise Taylor series about centres c_j = j / 32 ----------------------------
ERFC_STEP = 1.0 / 32
ERFC_MAX = 27.0                   # erfc(27) < 1e-318: beyond it, 0
_SQRT_PI = 1.7724538509055159


@njit(inline="always")
def _erfc_exact(c):
    """erfc(c) for c >= 0 to ~1e-16 relative, slowly (the table's centres only): the
    Maclaurin series of erf up to 1/2 (erfc >= 0.47 there: no cancellation), the continued
    fraction of erfc beyond, 5000 terms (Abramowitz & Stegun 7.1.5 and 7.1.14), both in
    plain float64 operations (no libm but exp64)."""
    if c <= 0.5:
        term, s, n = c, c, 0
        while abs(term) > 1e-18 * abs(s):
            n += 1
            term *= -c * c / n
            s += term / (2 * n + 1)
        return 1.0 - 2.0 / _SQRT_PI * s
    f = 0.0           # e^{-c^2}/sqrt(pi) / (c + (1/2)/(c + 1/(c + (3/2)/(c + ...)))), from the tail up
    for n in range(5000, 0, -1):
        f = (n / 2.0) / (c + f)
    return exp64(-c * c) / _SQRT_PI / (c + f)


@njit(**_JIT)
def _erfc_table(n):
    """[erfc(c_j), exp(-c_j^2)] for c_j = j/32, j < n."""
    t = np.empty((n, 2))
    for j in range(n):
        c = j * ERFC_STEP
        t[j, 0] = _erfc_exact(c)
        t[j, 1] = exp64(-c * c)
    return t


_ERFC = _erfc_table(int(ERFC_MAX / ERFC_STEP) + 2)


@njit(inline="always")
def erfc64(z, table):
    """erfc(z) in float64 (`table`: _ERFC). About the nearest centre c (|h| = |z - c| <= 1/64):
    erfc(z) = erfc(c) - 2/sqrt(pi) e^{-c^2} sum_{n>=1} (-1)^{n-1} H_{n-1}(c) h^n / n!,
    H the Hermite polynomials (d^n/dz^n e^{-z^2} = (-1)^n H_n e^{-z^2}); 12 terms leave
    < 1e-17 relative. erfc(-z) = 2 - erfc(z)."""
    if z != z:
        return z
    a = abs(z)
    if a >= ERFC_MAX:
        r = 0.0
    else:
        j = np.int64(math.floor(a * 32.0 + 0.5))
        c = j * ERFC_STEP
        h = a - c
        hm2, hm1 = 0.0, 1.0                       # H_{-1} (unused: 0), H_0
        term, s = 1.0, 0.0
        for n in range(1, 13):
            term = term * h / n                   # h^n / n!
            s += term * hm1 if n % 2 == 1 else -term * hm1
            hm2, hm1 = hm1, 2.0 * c * hm1 - 2.0 * (n - 1) * hm2    # H_n
        r = table[j, 0] - 2.0 / _SQRT_PI * table[j, 1] * s
    return 2.0 - r if z < 0 else r


@njit(inline="always")
def gelu_erf64(v, table):
    """0.5 v (1 + erf(v / sqrt 2)) = 0.5 v erfc(-v / sqrt 2), in float64."""
    return 0.5 * v * erfc64(-v * 0.7071067811865476, table)


@njit(**_JIT)
def _exp_into(x, out):
    for i in range(x.shape[0]):
        out[i] = exp64(x[i])


def exp_array(x) -> np.ndarray:
    """exp64 of every element, float64 (for figures that are stored: numpy's np.exp picks
    a SIMD variant per CPU)."""
    x = np.ascontiguousarray(x, np.float64)
    out = np.empty_like(x)
    _exp_into(x.reshape(-1), out.reshape(-1))
    return out


# ---- sums -------------------------------------------------------------------------------
@njit(**_JIT)
def fsum64(x):
    """sum of a 1-D array in float64, first to last (one fixed order on every machine)."""
    s = 0.0
    for i in range(x.shape[0]):
        s += np.float64(x[i])
    return s


@njit(**_JIT)
def sq_sums(got, want):
    """(fsum64(want * want), fsum64((got - want) ** 2)) of two 1-D float64 arrays in one
    pass, the same operations in the same order (a product rounds once, no FMA without
    fastmath), without the two temporaries: the model check's weights are 0.4 G elements
    at 27 So400m layers."""
    ww, dd = 0.0, 0.0
    for i in range(want.shape[0]):
        w = want[i]
        d = got[i] - w
        ww += w * w
        dd += d * d
    return ww, dd


@njit(**_JIT)
def _ordered(a, b, out):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            out[i, j] = 0.0
        for k in range(a.shape[1]):
            x = a[i, k]
            for j in range(b.shape[1]):
                out[i, j] += x * b[k, j]


def matmul64_ordered(a, b) -> np.ndarray:
    """a @ b in float64, each element summed first k to last (vectorised across j only, no
    FMA): for small products whose float64 result is stored (not exact, but the same bits
    everywhere). a [m, k] or [k]; b [k, n]."""
    a = np.asarray(a, np.float64)
    one = a.ndim == 1
    a2 = np.ascontiguousarray(a.reshape(1, -1) if one else a)
    b2 = np.ascontiguousarray(b, np.float64)
    out = np.empty((a2.shape[0], b2.shape[1]))
    _ordered(a2, b2, out)
    return out[0] if one else out


# ---- matmul_f32: the exact sum of products, rounded once to float32 ------------------------
U = 2.0 ** -53


@njit(inline="always")
def _f32(x):
    """x rounded to float32, +0 for a zero, one NaN for any NaN (the bits a NaN or a zero
    sum carry depend on the order of the terms)."""
    y = np.float32(x + 0.0)
    if y != y:
        return np.uint32(0x7FC00000).view(np.float32)
    return y


NONE, NAN = 1 << 20, -(1 << 20)     # _qexp of a zero (no constraint) and of inf/NaN (fails the test)
I32 = np.int32                      # _qexp's type: a literal alone would make numba widen to int64


@njit(inline="always")
def _qexp(x):
    """log2 of the weight of float32 x's lowest set significand bit (x is a multiple of
    2^_qexp(x)); NONE for zero, NAN for inf or NaN. Integer operations only, without
    branches, so a row's minimum vectorises (integer min is associative), and all in int32:
    AVX2 has no int64 -> float conversion and no int64 min, so int64 arithmetic ran scalar
    (_widen_cols took twice as long on an AVX2 host). numba types int32 arithmetic as int64,
    so every intermediate is cast back to int32, which lets LLVM keep the vector lanes 32 bits
    wide (2.7x faster on AVX2). The same value as ab81399's int64 form on each of the 2^32
    inputs: experiments/host_time/qexp_exhaustive.py."""
    u = np.float32(x).view(np.int32)
    e = I32(I32(u >> I32(23)) & I32(0xFF))
    m = I32(I32(u & I32(0x7FFFFF)) | I32(min(e, I32(1)) << I32(23)))   # subnormals: no implicit bit
    low = I32(I32(np.float32(I32(m & I32(-m))).view(np.int32) >> I32(23)) - I32(127))  # m < 2^24: exact
    q = I32(I32(max(e, I32(1)) - I32(150)) + low)                      # subnormals: exponent 1
    q = I32(NAN) if e == I32(0xFF) else q
    return I32(NONE) if I32(u & I32(0x7FFFFFFF)) == I32(0) else q


@njit(**_JIT)
def _widen_rows(a, a64, ss, qa):
    """One pass over float32 a [bs, m, k] (any strides): a64 its float64 copy (C order, for
    BLAS), ss [bs, m] each row's sum of squares (four partial sums: the norm is an upper
    bound only, computed in any order, its rounding inside the doubled gamma_k and _certify's
    2^-20), qa [bs, m] each row's least _qexp (every product a[i, l] b[l, j]
    is a multiple of 2^(qa[i] + qb[j]))."""
    bs, m, k = a.shape
    for t in range(bs):
        for i in range(m):
            q = NONE
            for l in range(k):
                x = a[t, i, l]
                a64[t, i, l] = np.float64(x)
                q = min(q, _qexp(x))
            qa[t, i] = q
            s0, s1, s2, s3 = 0.0, 0.0, 0.0, 0.0
            r = a64[t, i]
            k4 = k - k % 4
            for l in range(0, k4, 4):
                s0 += r[l] * r[l]
                s1 += r[l + 1] * r[l + 1]
                s2 += r[l + 2] * r[l + 2]
                s3 += r[l + 3] * r[l + 3]
            for l in range(k4, k):
                s0 += r[l] * r[l]
            ss[t, i] = (s0 + s1) + (s2 + s3)


@njit(**_JIT)
def _widen_cols(b, b64, ss, qb):
    """_widen_rows for the columns of float32 b [bs, k, n]: b64, ss [bs, n], qb [bs, n]
    (row by row, each column's sum in k order: the j loop vectorises)."""
    bs, k, n = b.shape
    q = np.empty(n, np.int32)             # the quanta in int32, as _qexp makes them
    for t in range(bs):
        for j in range(n):
            ss[t, j] = 0.0
            q[j] = NONE
        for l in range(k):                # three plain loops: each vectorises (one did not)
            row, wide, s = b[t, l], b64[t, l], ss[t]
            for j in range(n):
                wide[j] = np.float64(row[j])
            for j in range(n):
                s[j] += wide[j] * wide[j]
            for j in range(n):
                q[j] = min(q[j], _qexp(row[j]))
        for j in range(n):
            qb[t, j] = q[j]


def widened(a3: np.ndarray, b3: np.ndarray):
    """(a64, b64, na, nb, qa, qb) of float32 a3 [bs, m, k] and b3 [bs, k, n]: the operands in
    float64 (C order), a's row and b's column norms, and their quanta (_widen_rows), each
    operand read once."""
    bs, m, k = a3.shape
    n = b3.shape[2]
    a64, b64 = np.empty((bs, m, k)), np.empty((bs, k, n))
    sa, sb = np.empty((bs, m)), np.empty((bs, n))
    qa, qb = np.empty((bs, m), np.int64), np.empty((bs, n), np.int64)
    _widen_rows(a3, a64, sa, qa)
    _widen_cols(b3, b64, sb, qb)
    return a64, b64, np.sqrt(sa), np.sqrt(sb), qa, qb


TWO53 = 2.0 ** 53


def _scaled(norm: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm / 2^q (exact: a power of two; inf for a row holding inf or NaN, 0 for a zero row),
    so that _certify's exactness test is one product per element; the 2^-20 on one side."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ldexp(norm * (1.0 + 2.0 ** -20), -np.clip(q, -2000, 2000).astype(np.int32))


@njit(**_JIT)
def _certify(c, na, nb, ra, rb, g, out, flagged):
    """out[b, i, j] = float32(c) where c is provably the exact sum, or where the interval
    c +- g na[b, i] nb[b, j] rounds to one float32 value (both ends, float32 rounding being
    monotonic); the others' flat indices b * m * n + i * n + j into `flagged`; returns how
    many. (Hoelder's |a|_1 |b|_inf and |a|_inf |b|_1 as well flag as many: measured on the
    4-layer default trial.)
    Exact: every product is a multiple of Q = 2^(qa + qb) and their absolute sum is at most
    na nb (Cauchy-Schwarz; the norms' rounding inside the 2^-20; ra, rb = na / 2^qa, nb / 2^qb
    with that factor, _scaled); below 2^53 Q every
    partial sum of them, in any order, is an integer times Q under 2^53, so a float64 value:
    no addition or FMA BLAS makes rounds. f16 operands' sums are often exact with a few bits
    more than float32 holds, many on float32 midpoints, which the interval flags (9.2 % of
    the simulator's MATMUL elements at 4 So400m layers, 99.9 % of those exact)."""
    nf = 0
    m, n = c.shape[1], c.shape[2]
    for b in range(c.shape[0]):
        for i in range(m):
            for j in range(n):
                v = c[b, i, j]
                if ra[b, i] * rb[b, j] < TWO53:             # na nb (1 + 2^-20) < 2^(53 + qa + qb)
                    out[b, i, j] = _f32(v)
                    continue
                e = g * na[b, i] * nb[b, j]
                lo, hi = np.float32(v - e), np.float32(v + e)
                if lo == hi and e == e and abs(e) < np.inf:      # finite bound, one rounding
                    out[b, i, j] = _f32(v)
                else:
                    flagged[nf] = (b * m + i) * n + j
                    nf += 1
    return nf


@njit(**_JIT)
def _compensated(a, b, idx, out, unsettled):
    """For each flat index (sorted by batch and column: each column of b is gathered once,
    then read contiguously): the sum of a[b, i, :] * b[b, :, j] (float64, exact products) in
    order, compensated (Neumaier's scheme with Knuth's TwoSum, Ogita-Rump-Oishi's Sum2): t
    within 2u|S| + 2k^2 u^2 sum|p| of the exact sum S (Higham §4.3); rounded where that interval holds no float32 boundary or where no
    addition rounded at all (then the sum is exact: f16 products are 22-bit, and a sum of
    them that lands on a float32 midpoint is usually exact in float64), else its index kept
    in `unsettled` (returns how many). A non-finite product: the plain sum in order."""
    m, n, k = a.shape[1], b.shape[2], a.shape[2]
    col = np.empty(k)
    nu, at = 0, -1
    for q in range(idx.shape[0]):
        f = idx[q]
        bb, i, j = f // (m * n), (f // n) % m, f % n
        if bb * n + j != at:
            at = bb * n + j
            for l in range(k):
                col[l] = b[bb, l, j]
        s, comp, sabs, exact = 0.0, 0.0, 0.0, True
        for l in range(k):
            p = a[bb, i, l] * col[l]
            t = s + p
            z = t - s
            err = (s - (t - z)) + (p - z)        # Knuth's TwoSum: the exact rounding error of s + p,
            comp += err                          # without Fast2Sum's unpredictable branch
            exact = exact and err == 0.0
            s = t
            sabs += abs(p)
        if not (abs(sabs) < np.inf):             # inf or NaN among the terms: IEEE's sum, in order
            out[bb, i, j] = _f32(s)
            continue
        if exact:                                # no addition rounded: s is the exact sum
            out[bb, i, j] = _f32(s)
            continue
        t = s + comp
        e = 4.0 * U * abs(t) + 4.0 * k * k * U * U * sabs * (1.0 + 2.0 * k * U)
        if np.float32(t - e) == np.float32(t + e):
            out[bb, i, j] = _f32(t)
        else:
            unsettled[nu] = f
            nu += 1
    return nu


def _exact(p: np.ndarray) -> np.float32:
    """float32(sum of the float64 values p), exactly rounded: math.fsum is the exact sum
    rounded once to float64 (h); rounding h to float32 rounds twice only where h is itself
    a float32 midpoint, where the exact residual's sign picks the side."""
    terms = p.tolist()
    h = math.fsum(terms)
    r = np.float32(h)
    other = np.nextafter(r, np.float32(np.inf) if float(r) < h else np.float32(-np.inf))
    if float(r) != h and (float(r) + float(other)) / 2 == h:      # h is a float32 midpoint
        res = math.fsum(terms + [-h])
        if res != 0:
            r = np.float32(np.nextafter(h, math.copysign(math.inf, res)))
    return np.float32(r + np.float32(0.0))


def _blas(a64: np.ndarray, b64: np.ndarray) -> np.ndarray:
    """The float64 products by BLAS, in whatever order it likes (a test swaps this for one
    that errs anywhere within the bound, tests/test_exact.py)."""
    return a64[0] @ b64[0] if a64.shape[0] == 1 else np.matmul(a64, b64)


def matmul_f32(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The exact a @ b rounded once to float32, for float32 a [..., m, k] and b [..., k, n]
    (leading dimensions broadcast as numpy's matmul does); `out` a float32 array of the
    result's shape (any strides). See the
    module docstring for why these bits are the same on every machine."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])     # numpy matmul's broadcasting
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    bs = math.prod(lead)
    a3 = np.broadcast_to(a, lead + (m, k)).reshape(bs, m, k)
    b3 = np.broadcast_to(b, lead + (k, n)).reshape(bs, k, n)
    if out is None:
        res = np.empty((bs, m, n), np.float32)
    else:
        assert out.dtype == np.float32 and out.shape == lead + (m, n), (out.dtype, out.shape)
        res = out[None] if out.ndim == 2 else out if out.ndim == 3 else np.empty((bs, m, n), np.float32)
    if k == 0:
        res[...] = 0
        return _shaped(res, lead, out)
    # C order: numpy hands a stack of C-contiguous matrices to BLAS (others to its own loop)
    a64, b64, na, nb, qa, qb = widened(a3, b3)
    with np.errstate(invalid="ignore", over="ignore"):      # inf/NaN operands: settled below
        c = _blas(a64, b64).reshape(bs, m, n)
    ra, rb = _scaled(na, qa), _scaled(nb, qb)
    # gamma_k, doubled: covers the float64 norms' own rounding and c +- e's
    g = 2.0 * k * U / (1.0 - k * U) * (1.0 + 2.0 ** -20)
    flagged = np.empty(bs * m * n, np.int64)
    nf = _certify(c, na, nb, ra, rb, g, res, flagged)
    if nf:
        unsettled = np.empty(nf, np.int64)
        fl = flagged[:nf]
        fl = fl[np.argsort(fl // (m * n) * n + fl % n, kind="stable")]     # by batch, then column
        nu = _compensated(a64, b64, fl, res, unsettled)
        for f in unsettled[:nu].tolist():
            bb, i, j = f // (m * n), (f // n) % m, f % n
            res[bb, i, j] = _exact(a64[bb, i] * b64[bb, :, j])
    return _shaped(res, lead, out)


def _shaped(res: np.ndarray, lead: tuple, out: np.ndarray | None) -> np.ndarray:
    """matmul_f32's result in its broadcast shape (into `out` if it was not written in place)."""
    if out is None:
        return res.reshape(lead + res.shape[1:])
    if out.ndim > 3:
        out[...] = res.reshape(out.shape)
    return out

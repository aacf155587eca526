"""compiler/exact.py against brute force that shares no code with it: matmul_f32 is the
exact sum of products (Python Fractions) rounded once to float32, whatever BLAS returns
within its error bound; exp64 and erfc64 are within 2 ulps / 2e-15 of libm's; the
simulator's f32 exp (sim/fmath.py) within 1.5 f32 ulps of numpy's float64 exp."""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from numba import njit

from compiler import exact
from compiler.sim import fmath


def _round_f32(q: Fraction) -> np.float32:
    """The float32 nearest the rational q, ties to even, by integer arithmetic alone."""
    if q == 0:
        return np.float32(0.0)
    sign, q = (-1 if q < 0 else 1), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()       # 2^e <~ q
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, -126)                                                 # subnormals: fixed spacing
    scaled = q / Fraction(2) ** (e - 23)                             # 24 bits before the point
    n, rem = divmod(scaled.numerator, scaled.denominator)
    if 2 * rem > scaled.denominator or (2 * rem == scaled.denominator and n % 2):
        n += 1
    v = math.ldexp(n, e - 23)
    return np.float32(sign * v if v < 2.0 ** 128 else sign * math.inf)


def brute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    fa, fb = [[Fraction(float(x)) for x in r] for r in a], [[Fraction(float(x)) for x in c] for c in b.T]
    for i, ra in enumerate(fa):
        for j, cb in enumerate(fb):
            out[i, j] = _round_f32(sum((x * y for x, y in zip(ra, cb)), Fraction(0)))
    return out


def cases():
    rng = np.random.default_rng(24)
    f16 = lambda *s: rng.standard_normal(s).astype(np.float16).astype(np.float32)
    fp8 = lambda *s: (rng.standard_normal(s) * 8).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * np.float32(0.0137)
    ints = lambda *s: rng.integers(-3, 4, s).astype(np.float32)
    yield "f16", f16(9, 300), f16(300, 11)
    yield "f16 x fp8*scale", f16(7, 500), fp8(500, 6)
    a = ints(12, 40) * np.float32(2 ** 20)
    a[:, 0] = np.float32(1 + 2 ** -23)                 # sums on float32 midpoints: exact ties
    yield "ties", a, ints(40, 9)
    big = f16(4, 64) * np.float32(2 ** 60)
    yield "overflow", big, f16(64, 5) * np.float32(2 ** 60)
    tiny = f16(5, 33) * np.float32(2 ** -70)
    yield "subnormal", tiny, f16(33, 4) * np.float32(2 ** -60)
    z = f16(6, 20)
    z[2] = 0
    yield "zero rows", z, -f16(20, 3)
    c = f16(30, 200)
    yield "cancellation", c, np.concatenate([c.T[:, :4], -c.T[:, :4]], 0)[:200]


@pytest.mark.parametrize("name, a, b", list(cases()), ids=[c[0] for c in cases()])
def test_matmul_f32_is_the_exact_sum_rounded_once(name, a, b):
    got = exact.matmul_f32(a, b)
    want = brute(a, b)
    assert got.dtype == np.float32
    bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    assert not len(bad), [(tuple(ij), got[tuple(ij)], want[tuple(ij)]) for ij in bad[:5]]


def test_matmul_f32_nonfinite_and_shapes():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 16)).astype(np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)
    a[1, 3], a[2, 0], b[5, 2] = np.inf, np.nan, -np.inf
    got = exact.matmul_f32(a, b)
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    fin = np.isfinite(want)
    assert (np.isnan(got) == np.isnan(want)).all() and (got[np.isinf(want)] == want[np.isinf(want)]).all()
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-6)
    assert set(got.view(np.uint32)[np.isnan(got)].tolist()) <= {0x7FC00000}      # one NaN
    assert exact.matmul_f32(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)).tolist() == [[0.0] * 3] * 2
    A, B = rng.standard_normal((3, 2, 5, 7)).astype(np.float32), rng.standard_normal((2, 7, 4)).astype(np.float32)
    got = exact.matmul_f32(A, B)                        # numpy's broadcasting
    assert got.shape == (3, 2, 5, 4)
    assert got[2, 1].tobytes() == exact.matmul_f32(A[2, 1], B[1]).tobytes()
    out = np.zeros((10, 8), np.float32)
    exact.matmul_f32(A[0, 0], B[0], out=out[::2, 1:5])   # a strided view, written in place
    assert out[::2, 1:5].tobytes() == exact.matmul_f32(A[0, 0], B[0]).tobytes() and not out[1::2].any()


def test_any_blas_within_the_bound_gives_the_same_bits(monkeypatch):
    """A BLAS that errs anywhere within k u sum|a||b| (another kernel, order, FMA, threads):
    the same bits. One that errs 10x more changes some: the comparison can see a change.
    Full float32 operands: no sum of theirs is provably exact (_certify), so every
    element rests on the bound (an exact sum is exact in any IEEE order: the next test)."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal((60, 700)).astype(np.float32)
    b = rng.standard_normal((700, 50)).astype(np.float32)
    want = exact.matmul_f32(a, b)
    k = a.shape[1]
    real = exact._blas

    def noisy(scale):
        def blas(a64, b64):
            c = real(a64, b64)
            s = np.abs(a64) @ np.abs(b64)
            return c + rng.uniform(-1, 1, c.shape) * scale * k * 2.0 ** -53 * s
        return blas
    monkeypatch.setattr(exact, "_blas", noisy(1.0))
    for _ in range(3):
        assert exact.matmul_f32(a, b).tobytes() == want.tobytes()
    monkeypatch.setattr(exact, "_blas", noisy(2.0 ** 30))      # far outside the bound: caught
    assert exact.matmul_f32(a, b).tobytes() != want.tobytes()


def test_exact_sums_settle_f16_midpoints_in_any_order(monkeypatch):
    """f16 operands (the simulator's MATMUL): sums that are exact in float64 and land on
    float32 midpoints, which the interval test flags. _certify settles them from BLAS's
    sum, in whatever order an IEEE BLAS adds (here: k permuted, and a pairwise reduction):
    the brute-force bits either way; a BLAS off by one float64 unit there is not corrected
    (the shortcut trusts only sums that no IEEE order can round)."""
    rng = np.random.default_rng(26)
    a = (rng.standard_normal((40, 128)) * 4).astype(np.float16).astype(np.float32)
    b = (rng.standard_normal((128, 30)) / 4).astype(np.float16).astype(np.float32)
    want = brute(a, b)
    real = exact._blas
    perm = rng.permutation(128)
    for blas in (real, lambda a64, b64: a64[..., perm] @ b64[..., perm, :],
                 lambda a64, b64: (a64[..., :, :, None] * b64[..., None, :, :]).sum(-2)):
        monkeypatch.setattr(exact, "_blas", blas)
        assert exact.matmul_f32(a, b).tobytes() == want.tobytes()
    moved = []
    for way in (np.inf, -np.inf):       # a tie moved either way: one of the two rounds it otherwise
        monkeypatch.setattr(exact, "_blas", lambda a64, b64: np.nextafter(real(a64, b64), way))
        moved.append(exact.matmul_f32(a, b).tobytes() != want.tobytes())
    assert any(moved)


@njit
def _exp_all(x, out):
    for i in range(x.shape[0]):
        out[i] = exact.exp64(x[i])


@njit
def _erfc_all(x, out, t):
    for i in range(x.shape[0]):
        out[i] = exact.erfc64(x[i], t)


def test_exp64_and_erfc64_against_libm():
    x = np.concatenate([np.linspace(-740, 709, 100_001), np.random.default_rng(1).standard_normal(20_000) * 5,
                        [0.0, -0.0, 1e-300, -1e-300, np.inf, -np.inf, np.nan]])
    got = np.empty_like(x)
    _exp_all(x, got)
    want = np.array([math.exp(v) if v < 709.8 else math.inf for v in x])
    normal = np.isfinite(want) & (want > 2.3e-308)
    assert (np.abs(got[normal] - want[normal]) <= 2 * np.spacing(want[normal])).all()
    sub = ~normal & np.isfinite(want)
    assert (np.abs(got[sub] - want[sub]) <= 2 ** -1074).all()
    assert np.isnan(got[-1]) and got[-3] == np.inf and got[-2] == 0
    z = np.concatenate([np.linspace(-6, 12, 200_001), [30.0, -30.0]])
    got = np.empty_like(z)
    _erfc_all(z, got, exact._ERFC)
    want = np.array([math.erfc(v) for v in z])
    assert (np.abs(got - want) <= 2e-15 * want + 1e-300).all()


def test_simulators_exp_within_an_ulp_and_a_half():
    x = np.concatenate([np.linspace(-104, 88.7, 1_000_001, dtype=np.float32),
                        np.array([np.inf, -np.inf, np.nan, 0, -0.0, 100, -200], np.float32)])
    with np.errstate(all="ignore"):
        got = fmath.exp(x)
        want = np.exp(x.astype(np.float64))
    normal = (want > 1.2e-38) & (want < 3.4e38)
    ulp = np.spacing(want[normal].astype(np.float32)).astype(np.float64)
    assert got.dtype == np.float32 and (np.abs(got[normal] - want[normal]) <= 1.5 * ulp).all()
    assert np.isnan(got[-5]) and got[-7] == np.inf and got[-6] == 0 and got[-2] == np.inf and got[-1] == 0


@njit
def _qexps(x, out):
    for i in range(x.shape[0]):
        out[i] = exact._qexp(x[i])


def test_qexp_is_the_lowest_set_bit():
    """_qexp(x): x / 2^q is an odd integer (normal, subnormal, f16 and FP8 values alike);
    zero gives NONE, inf and NaN give NAN."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.standard_normal(3000).astype(np.float32),
                        rng.standard_normal(1000).astype(np.float16).astype(np.float32),
                        (rng.integers(1, 1 << 23, 1000) * 2.0 ** -149).astype(np.float32),      # subnormals
                        np.float32([1.0, -2.0 ** -149, 3.0 * 2 ** 100, 65504.0])])
    q = np.empty(x.size, np.int64)
    _qexps(x, q)
    for v, e in zip(x.tolist(), q.tolist()):
        r = math.ldexp(v, -e)
        assert r.is_integer() and int(r) % 2 == 1, (v, e)
    special = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan])
    q = np.empty(5, np.int64)
    _qexps(special, q)
    assert q.tolist() == [exact.NONE] * 2 + [exact.NAN] * 3


def _lowest_bit_exponent(v: float) -> int:
    """log2 of the lowest set bit's weight of a finite nonzero float, by Fractions alone."""
    f = Fraction(v)
    num, den = abs(f.numerator), f.denominator
    return (num & -num).bit_length() - 1 - (den.bit_length() - 1)


def test_widened_operands_norms_and_quanta():
    """matmul_f32's one pass over each operand (exact.widened): the float64 copies equal
    numpy's widening, the norms the Euclidean norms to rounding (an upper bound's slack is
    2^-20), the quanta the least lowest-set-bit exponent of each row of a and column of b
    (Fractions), zero rows NONE and a NaN / inf anywhere NAN; b as a transposed view too."""
    rng = np.random.default_rng(31)
    a = rng.standard_normal((3, 9, 70)).astype(np.float16).astype(np.float32)
    b = (rng.standard_normal((3, 50, 70)) * 8).astype(ml_dtypes.float8_e4m3fn).astype(np.float32).transpose(0, 2, 1)
    a[0, 2] = 0
    a[1, 3, 5], b[2, 7, 4] = np.nan, np.inf
    a[2, 1, :5] = np.float32(2.0 ** -140)          # subnormals
    a64, b64, na, nb, qa, qb = exact.widened(a, b)
    assert a64.dtype == b64.dtype == np.float64 and a64.flags.c_contiguous and b64.flags.c_contiguous
    assert a64.tobytes() == a.astype(np.float64).tobytes() and b64.tobytes() == b.astype(np.float64).tobytes()
    want_na = np.sqrt((a.astype(np.float64) ** 2).sum(2))
    want_nb = np.sqrt((b.astype(np.float64) ** 2).sum(1))
    for got, want in ((na, want_na), (nb, want_nb)):
        fin = np.isfinite(want)
        assert (np.abs(got[fin] - want[fin]) <= 1e-12 * want[fin]).all()
        assert (np.isnan(got) == np.isnan(want)).all() and (np.isinf(got) == np.isinf(want)).all()

    def quanta(vals):
        vals = [float(v) for v in vals]
        if any(not math.isfinite(v) for v in vals):
            return exact.NAN
        nz = [_lowest_bit_exponent(v) for v in vals if v != 0]
        return min(nz) if nz else exact.NONE
    assert qa.tolist() == [[quanta(a[t, i]) for i in range(a.shape[1])] for t in range(a.shape[0])]
    assert qb.tolist() == [[quanta(b[t, :, j]) for j in range(b.shape[2])] for t in range(b.shape[0])]


def test_every_element_through_the_compensated_fallback(monkeypatch):
    """With _certify settling nothing (every element flagged), the compensated and exact
    fallbacks alone give the brute-force bits, on f16 x FP8 operands and exact ties: the
    fallback is what a future fast path of the certified one must agree with."""
    real = exact._certify

    def none_settled(c, na, nb, ra, rb, g, out, flagged):
        real(c, na, nb, ra, rb, g, out, flagged)
        flagged[:c.size] = np.arange(c.size)
        out[...] = np.nan
        return c.size
    monkeypatch.setattr(exact, "_certify", none_settled)
    for name, a, b in list(cases())[:3]:
        assert exact.matmul_f32(a, b).tobytes() == brute(a, b).tobytes(), name

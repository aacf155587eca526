"""The reference's arithmetic, op by op: f16 rounding, the exact dot and an op's matmul, GELU,
layernorm and softmax, and the FP8 table lookup, each giving the same bits on every machine.
The graph evaluation that applies them, and the tolerance, are reference.py; this file knows
no graph (an op's attributes at most), so readback.py applies the same functions to the
device's own inputs, and a change to the numerics and a change to the evaluation are
different files.

How exact, and the same on every machine (issue #24; DESIGN.md §7a "Determinism": no
BLAS kernel, BLAS thread count, SIMD width, CPU vendor, numba target or hash seed changes
a byte of the reference artifact or the tolerance; tests/test_determinism.py):
  * the evaluation holds float32 values. An op's exact result is a real number the device
    must round to f16 (11 bits); the reference computes it first to within the errors
    below, so only a result that close to a rounding boundary can round the other way --
    as the device's own f32 arithmetic can.
  * matmuls (`dot`, compiler/exact.py `matmul_f32`): the exact sum of the products of the
    operands' float32 values, rounded once to float32. BLAS does the work in float64
    (every product exact), and only where a rigorous bound, whatever order BLAS summed
    in, proves which float32 the exact sum rounds to; the rest (~0.2 % of outputs) are
    summed again in a fixed order, compensated, or exactly. So a matmul errs by at most
    half a float32 unit of its output, before its f16 rounding (it erred by up to 2^-16
    sum|a*b| when it summed float32 blocks of 256 terms with BLAS, whose kernel decided
    the bits: 0.07-0.23 % of a layer's outputs then rounded to another f16 value).
  * elementwise and row-wise ops run in float64 in compiled loops, in a fixed order,
    rounded once to float32: GELU (erf form: 0.5 x erfc(-x/sqrt2), exact.erfc64; tanh form:
    x / (1 + e^{-2u}), exact.exp64), layernorm (two-pass mean and variance), softmax (max,
    exp64, sum, divide); exp64 and erfc64 are written from +, -, *, / (numpy's exp and
    libm's erf pick CPU-specific variants). Each within a float32 unit of the exact value.
  * f16 rounding of float32 results is one compiled in-place pass equal to numpy's
    cast there and back over all 2^32 float32 values (`_round_f32_inplace`).
  Such flips then propagate as the device's own rounding does.

The file reads top-down: f16 rounding; dot (exact.matmul_f32); GELU (erf kernel and its
f16 table); the FP8 lookup (reference._value's); matmul; gelu (and the tanh kernel),
layernorm, softmax.

What is only faster (issue 13, round 5; none of it changes an operation or its order):
f16 rounding branch-free and vectorised (same values on all 2^32 inputs); GELU of an input
that is an f16 value (all of the rounded evaluation's) taken from a table of _gelu_erf's
own results for the 61,440 normal f16 values; softmax in passes LLVM vectorises; grouped
matmuls (attention) written into their output blocks and rounded there."""
from __future__ import annotations

import math
import threading

import numpy as np
from .numba_probe import njit     # numba without its scipy.linalg probe

from . import exact


def round_to_f16(x: np.ndarray) -> np.ndarray:
    """float32/float64 -> the nearest float16 value (ties to even; overflow to +-inf, NaN
    kept), in the input's float dtype (float64 for anything else): numpy's direct,
    correctly rounded cast to float16 (one rounding from either width)."""
    x = np.asarray(x)
    dt = x.dtype if x.dtype in (np.float32, np.float64) else np.float64
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(dt)


@njit(nogil=True, cache=True)
def _round_f32_inplace(u):
    """x[i] = round_to_f16(x[i]) for a float32 array viewed as uint32 `u`, in one pass:
    the same values as numpy's cast to float16 and back (round to nearest even; at
    65520 and above inf; NaN keeps its top 10 payload bits, at least one set), equal
    to it over all 2**32 float32 values (experiments/host_time/f16_exhaustive.py;
    tests/test_reference.py samples it). Written for this module alone: the
    simulator's store rounds with code of its own (compiler/sim/jit.py).

    Branch-free, so it vectorises (~0.15 ns per element in cache, ~6x the branchy
    loop it replaced): |x| is rounded to a multiple of its f16 ulp by one float32
    addition, (|x| + c) - c with c = 1.5 * 2**13 * (|x|'s binade, 2**-14 for f16
    subnormals), whose ulp is that f16 ulp: the sum stays in c's binade, so it is
    rounded once, to nearest even (c's own multiple of the ulp is even), and the
    subtraction is exact. Every intermediate is wrapped in np.uint32: numba widens
    uint32 arithmetic to 64 bits otherwise, which leaves the loop scalar."""
    for i in range(u.shape[0]):
        b = u[i]
        a = np.uint32(b & np.uint32(0x7FFFFFFF))
        e = np.uint32(max(np.uint32(a & np.uint32(0x7F800000)), np.uint32(0x38800000)))
        c = np.uint32(e + np.uint32(0x06C00000)).view(np.float32)
        r = np.float32(np.float32(a.view(np.float32) + c) - c).view(np.uint32)
        r = np.uint32(0x7F800000) if a >= np.uint32(0x477FF000) else r          # rounds to 65536 or more: inf
        p = np.uint32(np.uint32(a & np.uint32(0x7FFFFF)) >> np.uint32(13))
        nan = np.uint32(np.uint32(0x7F800000) | np.uint32(np.uint32(max(p, np.uint32(1))) << np.uint32(13)))
        r = nan if a > np.uint32(0x7F800000) else r
        u[i] = np.uint32(np.uint32(b ^ a) | r)


def _round_fresh(x: np.ndarray) -> np.ndarray:
    """round_to_f16 of an array nothing else holds, in place when it is a float array of
    its own (an op's fresh result): the same values, one array fewer per op (27 layers
    of rounded activations being ~0.9 G elements; float32 in one compiled pass, ~6x
    numpy's cast there and back)."""
    if isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float64) and x.base is None \
            and x.flags.writeable and x.flags.c_contiguous:
        if x.dtype == np.float32:
            _round_f32_inplace(x.reshape(-1).view(np.uint32))
        else:
            with np.errstate(over="ignore"):
                np.copyto(x, x.astype(np.float16))
        return x
    return round_to_f16(x)


def dot(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a @ b: the exact sum of the products of the operands' float32 values, rounded once to
    float32 (exact.matmul_f32: the same bits for any BLAS kernel, thread count or CPU), in
    float64 when either operand is float64 (readback's own checks: the operands are taken
    as float32 values, as the device holds them). `out` (float32 operands only): a float32
    array, a view with unit column stride say, to write the product into."""
    wide = np.result_type(a, b) == np.float64
    if out is not None:
        assert not wide and out.dtype == np.float32
        return exact.matmul_f32(a, b, out=out)
    r = exact.matmul_f32(a, b)
    return r.astype(np.float64) if wide else r


@njit(nogil=True, cache=True)
def _gelu_erf(x, out):
    """out = 0.5 x erfc(-x / sqrt 2), each element in float64 (exact.gelu_erf64: no libm),
    then rounded once to out's width; NaN in, one NaN out."""
    table = exact._ERFC
    for i in range(x.shape[0]):
        y = exact.gelu_erf64(np.float64(x[i]), table)
        out[i] = y if y == y else np.nan


GELU_SPLIT = 1 << 20     # elements from which GELU runs as two halves on two threads
F16_NORMALS = 0x23BFF - 0x1C400 + 1   # finite normal f16 magnitudes: float32 bits >> 13 from 0x1C400


@njit(nogil=True, cache=True)
def _gelu_erf_f32(x, u, table, out):
    """_gelu_erf of float32 `x` (`u` the same memory as uint32): an element that is a normal
    f16 value (the rounded evaluation's are all f16 values) takes its result from `table`,
    _gelu_erf of every such value (_gelu_table), so the same bits; any other element (the
    unrounded evaluation's, zeros, f16 subnormals, inf, NaN) is computed as _gelu_erf does."""
    erfc = exact._ERFC
    for i in range(x.shape[0]):
        b = u[i]
        a = np.uint32(b & np.uint32(0x7FFFFFFF))
        if np.uint32(b & np.uint32(0x1FFF)) == 0 and np.uint32(0x38800000) <= a <= np.uint32(0x477FE000):
            out[i] = table[np.int64(a >> np.uint32(13)) - 0x1C400 + np.int64(b >> np.uint32(31)) * F16_NORMALS]
        else:
            y = exact.gelu_erf64(np.float64(x[i]), erfc)
            out[i] = y if y == y else np.nan


_GELU_TABLE: list = []


def _gelu_table() -> np.ndarray:
    """float32 GELU (erf form) of every normal f16 value, +x then -x, made by _gelu_erf
    itself (61,440 erf calls, ~1 ms; once per process)."""
    if not _GELU_TABLE:
        mag = (np.arange(0x1C400, 0x1C400 + F16_NORMALS, dtype=np.uint32) << np.uint32(13))
        x = np.concatenate([mag, mag | np.uint32(0x80000000)]).view(np.float32)
        t = np.empty_like(x)
        _gelu_erf(x, t)
        _GELU_TABLE.append(t)
    return _GELU_TABLE[0]


@njit(nogil=True, cache=True)
def _lookup(codes, table, out):
    """out[i] = table[codes[i]] (numpy's fancy indexing, ~5x faster: 27 layers of FP8
    weights are 0.4 G lookups per evaluation)."""
    for i in range(codes.shape[0]):
        out[i] = table[codes[i]]


def _tiles(groups, m, n, rows, cols) -> bool:
    """Do the groups' m x n output blocks tile the rows x cols output exactly (each element
    written once, none left zero)?"""
    at = {(g[4], g[5]) for g in groups}
    return (rows % m == 0 and cols % n == 0 and len(at) == len(groups) == (rows // m) * (cols // n)
            and all(r % m == 0 and c % n == 0 for r, c in at))


def matmul(op, a, b, f16: bool = False):
    """The op's output; `f16`: rounded to f16 (the evaluation's rounding of an f16 output),
    block by block as each is made where the blocks tile the output (attention's scores:
    16 heads of 730 x 730 rounded while in cache), the same values as rounding it after."""
    m, k, n = op.attr("m"), op.attr("k"), op.attr("n")
    groups = op.attr("groups", ((0, 0, 0, 0, 0, 0),))
    tb = op.attr("transpose_b", False)
    rows = max(g[4] for g in groups) + m
    cols = max(g[5] for g in groups) + n
    sc = op.attr("scale", 1.0)
    operands = [(a[ar:ar + m, ac:ac + k], b[br:br + n, bc:bc + k].T if tb else b[br:br + k, bc:bc + n])
                for ar, ac, br, bc, _, _ in groups]
    if len(groups) == 1 and (rows, cols) == (m, n):   # one product filling the output (most matmuls)
        f32 = np.result_type(a, b, np.float32) == np.float32
        out = dot(*operands[0], out=np.empty((m, n), np.float32) if f32 else None)
    elif np.result_type(a, b, np.float32) == np.float32 and _tiles(groups, m, n, rows, cols):
        # each block's product written where it goes (no copies), scaled and rounded there; the
        # scale per block is the whole output's elementwise product, the blocks covering it all
        out = np.empty((rows, cols), np.float32)
        for (_, _, _, _, cr, cc), ab in zip(groups, operands):
            blk = dot(*ab, out=out[cr:cr + m, cc:cc + n])
            if sc != 1.0:
                blk *= sc
            if f16 and blk.flags.c_contiguous:
                _round_f32_inplace(blk.reshape(-1).view(np.uint32))
        if f16 and not out[:m, :n].flags.c_contiguous:     # column blocks: the whole output, after
            _round_f32_inplace(out.reshape(-1).view(np.uint32))
        return out
    else:
        blocks = [dot(*ab) for ab in operands]
        out = np.zeros((rows, cols), np.result_type(a, b, np.float32))
        for (_, _, _, _, cr, cc), blk in zip(groups, blocks):
            out[cr:cr + m, cc:cc + n] = blk
    if sc != 1.0:
        out *= sc
    return _round_fresh(out) if f16 else out


def gelu(x, approx: str):
    if approx == "erf":
        x = np.asarray(x)
        x = x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)
        out = np.empty_like(x)
        flat = np.ascontiguousarray(x).reshape(-1)
        if x.dtype == np.float32:         # 27 layers are 85 M erf calls, ~1 s: f16 values by table
            table, o = _gelu_table(), out.reshape(-1)
            h = flat.size // 2 if flat.size >= GELU_SPLIT else 0
            # the unrounded evaluation's erf calls (~1 s) are its largest step outside BLAS and
            # make it the later of the two: half of each on a thread of its own takes a share
            # of the core the rounded one runs on, and the two finish closer together
            helper = threading.Thread(target=_gelu_erf_f32, args=(flat[h:], flat[h:].view(np.uint32), table, o[h:])) if h else None
            if helper is not None:
                helper.start()
            _gelu_erf_f32(flat[:h or None], flat[:h or None].view(np.uint32), table, o[:h or None])
            if helper is not None:
                helper.join()
        else:
            _gelu_erf(flat, out.reshape(-1))
        return out
    x = np.asarray(x)
    x = x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)
    out = np.empty_like(x)
    _gelu_tanh(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


@njit(nogil=True, cache=True)
def _gelu_tanh(x, out):
    """out = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), as x / (1 + e^{-2u}) (the
    same function without 1 + tanh u's cancellation for u << 0), each element in float64
    (exact.exp64: no libm), rounded once to out's width; NaN in, one NaN out."""
    c = -2.0 * math.sqrt(2.0 / math.pi)
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        y = v / (1.0 + exact.exp64(c * (v + 0.044715 * (v * v * v))))
        out[i] = y if y == y else np.nan


def layernorm(x, gamma, beta, eps):
    """(x - mean) / sqrt(var + eps) * gamma + beta per row, biased variance, in float64 in a
    fixed order (_layernorm_rows), rounded once to x's float width."""
    x = np.asarray(x)
    x = x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)
    out = np.empty(x.shape, x.dtype)
    g = np.broadcast_to(np.asarray(gamma, np.float64).reshape(-1), x.shape[1:])
    b = np.broadcast_to(np.asarray(beta, np.float64).reshape(-1), x.shape[1:])
    _layernorm_rows(np.ascontiguousarray(x), np.ascontiguousarray(g), np.ascontiguousarray(b), float(eps), out)
    return out


@njit(nogil=True, cache=True)
def _layernorm_rows(x, g, b, eps, out):
    """Two passes per row, each summing first to last in float64 (x's values exact there):
    the mean, then the biased variance; rstd = 1 / sqrt(var + eps) (sqrt and / are
    correctly rounded everywhere); NaN in, one NaN out."""
    n = x.shape[1]
    for r in range(x.shape[0]):
        s = 0.0
        for j in range(n):
            s += np.float64(x[r, j])
        mu = s / n
        q = 0.0
        for j in range(n):
            d = np.float64(x[r, j]) - mu
            q += d * d
        rstd = 1.0 / math.sqrt(q / n + eps)
        for j in range(n):
            y = (np.float64(x[r, j]) - mu) * rstd * g[j] + b[j]
            out[r, j] = y if y == y else np.nan


@njit(nogil=True, cache=True)
def _softmax_rows(x, v, sc, mode, out, divide=True):
    """out[r, :v] = softmax of s = x[r, :v] * sc, out[r, v:] = 0. s as numpy's multiply gives
    it (mode 0: float64 x, the float64 product; 1: float32 x times float32(sc); 2: float32 x,
    a float64 scale: the product in float64, rounded to float32); then in float64, first to last: the row max, exp64(s -
    max), their sum, each divided by it and rounded once to out's width. A NaN anywhere in
    the row, or a +inf (inf - inf), makes the row NaN, as numpy's whole-array form does;
    NaN out is one NaN."""
    e = np.empty(v)
    for r in range(x.shape[0]):
        for j in range(v):                # passes of one kind each: LLVM vectorises them
            sj = np.float64(x[r, j]) * sc
            if mode == 1:
                sj = np.float64(np.float32(x[r, j]) * np.float32(sc))
            elif mode == 2:
                sj = np.float64(np.float32(sj))
            e[j] = sj
        m = -np.inf
        nan = False
        for j in range(v):
            nan |= e[j] != e[j]
            m = e[j] if e[j] > m else m
        if nan:
            m = np.nan
        for j in range(v):
            e[j] = exact.exp64(e[j] - m)
        t = 0.0
        for j in range(v):                # the one order-bound loop
            t += e[j]
        for j in range(v):
            y = e[j] / t if divide else e[j]      # deferred: exp(s - max) alone
            out[r, j] = y if y == y else np.nan
        for j in range(v, out.shape[1]):
            out[r, j] = 0


def softmax(x, scale, valid=0, f16: bool = False, deferred: bool = False):
    """Row softmax over the first `valid` columns (0 = all); masked columns are 0, in x's
    float width (_softmax_rows: float64 in a fixed order, exp64, one rounding; `f16`: then
    rounded to f16, the evaluation's rounding). `deferred` (the op's attr, policy.deferred_norm):
    exp(s - rowmax) without the division (row_normalised divides after p·v)."""
    x = np.asarray(x)
    x = np.ascontiguousarray(x if x.dtype in (np.float32, np.float64) else x.astype(np.float64))
    v = valid or x.shape[1]
    narrow = type(scale) in (float, int, np.float32)      # numpy's weak scalars
    mode = 0 if x.dtype == np.float64 else (1 if narrow else 2)
    out = np.empty_like(x)
    _softmax_rows(x, v, float(scale), mode, out, not deferred)
    return _round_fresh(out) if f16 else out


@njit(nogil=True, cache=True)
def _row_sums(a, out):
    """out[r] = sum of a[r, :] in float64, first to last (a fixed order on every machine)."""
    for r in range(a.shape[0]):
        t = 0.0
        for j in range(a.shape[1]):
            t += a[r, j]
        out[r] = t


def row_normalised(op, y, a):
    """A matmul with attr `normalise` (policy.deferred_norm: its a is an unnormalised softmax):
    each group's output rows divided by the sums of the group's a rows over its k columns,
    in float64, rounded once to y's width. y is the plain matmul's unrounded output."""
    m, k, n = op.attr("m"), op.attr("k"), op.attr("n")
    out = y.copy()
    sums = np.empty(m)
    for ar, ac, _, _, cr, cc in op.attr("groups", ((0, 0, 0, 0, 0, 0),)):
        _row_sums(np.ascontiguousarray(a[ar:ar + m, ac:ac + k]), sums)
        out[cr:cr + m, cc:cc + n] = y[cr:cr + m, cc:cc + n] / sums[:, None]
    return out

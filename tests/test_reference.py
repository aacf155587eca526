"""The reference's own f16 rounding (one compiled pass over float32, in place) gives
numpy's cast to float16 and back on every binade's ties and near-ties, the specials and
a random sample (all 2**32 values: experiments/host_time/f16_exhaustive.py)."""
import math

import numpy as np

from compiler import reference, reference_ops
from compiler.ir import Op


def test_inplace_rounding_is_numpys_cast():
    top = np.arange(1 << 19, dtype=np.uint32) << 13          # sign, exponent, 10 kept mantissa bits
    low = np.array([0, 1, 0xFFE, 0xFFF, 0x1000, 0x1001, 0x1FFE, 0x1FFF], np.uint32)   # the 13 dropped
    rng = np.random.default_rng(7)
    bits = np.concatenate([(top[:, None] | low).reshape(-1),
                           rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)])
    with np.errstate(all="ignore"):
        want = bits.view(np.float32).astype(np.float16).astype(np.float32).view(np.uint32)
    got = bits.copy()
    reference_ops._round_f32_inplace(got)
    bad = np.flatnonzero(got != want)
    assert not len(bad), [(hex(bits[i]), hex(want[i]), hex(got[i])) for i in bad[:5]]


def test_round_fresh_keeps_width_and_values():
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65519.0, 65520.0, -2.0 ** -25, 2.0 ** -24 * 1.5, np.nan])
    for dt in (np.float32, np.float64):
        y = reference_ops._round_fresh(x.astype(dt))
        assert y.dtype == dt
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(y, x.astype(np.float16).astype(dt))


# The compiled and blocked paths against plain numpy / math.erf, written here without them.
EDGE = np.array([0.0, -0.0, 1.0, -1.0, 2.0 ** -24, -(2.0 ** -25), 2.0 ** -14, 6.1e-5, 1e-30, 1e-45,
                 65504.0, -65504.0, 1e4, -1e4, 3e38, -3e38, np.inf, -np.inf, np.nan, 5.5, -5.5,
                 0.84375, -0.84375, 6.0, -6.0, 28.0], np.float32)


def _edge_and_f16(rng):
    f16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)   # every f16, specials too
    bits = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([EDGE, f16, bits.view(np.float32), rng.standard_normal(1 << 14).astype(np.float32) * 4])


def _ulps32(got, want):
    """|got - want| in float32 units at want (NaN where both are NaN: 0)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(np.isnan(got) & np.isnan(want), 0.0, np.abs(got - want))
        d = np.where(got == want, 0.0, d)          # infinities
        u = d / np.maximum(np.spacing(np.abs(want).astype(np.float32)).astype(np.float64), 2.0 ** -149)
        return np.where(np.isnan(got) & np.isnan(want), 0.0, u)


def test_gelu_erf_by_table_is_the_direct_kernel_and_math_erf():
    """The table (f16 inputs) gives the direct kernel's bits; both are within 1 float32 ulp
    (plus 2^-140 absolute in the far tail) of libm's erf in float64, computed here without them."""
    x = _edge_and_f16(np.random.default_rng(11))
    got = reference_ops.gelu(x, "erf")
    direct = np.empty_like(x)
    reference_ops._gelu_erf(x, direct)
    assert got.dtype == np.float32 and got.tobytes() == direct.tobytes()
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) if math.isfinite(v) else
                         0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x.astype(float).tolist()])
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero((_ulps32(got, want) > 1) & (np.abs(got - want) > 2.0 ** -140))
    assert not len(bad), [(x[i], got[i], want[i]) for i in bad[:5]]
    big = np.resize(x, reference_ops.GELU_SPLIT + 3)          # in two halves on two threads
    want = np.empty_like(big)
    reference_ops._gelu_erf(big, want)
    assert reference_ops.gelu(big, "erf").view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
    x64 = EDGE.astype(np.float64)              # float64 inputs (read-back) keep the direct path
    ref64 = [0.5 * v * math.erfc(-v / math.sqrt(2.0)) if math.isfinite(v) else math.nan for v in x64.tolist()]
    np.testing.assert_allclose(reference_ops.gelu(x64, "erf")[np.isfinite(x64)], np.array(ref64)[np.isfinite(x64)],
                               rtol=1e-13, atol=1e-300)


def test_gelu_tanh_is_numpys_float64_formula():
    """Within a float32 ulp of numpy's float64 x / (1 + exp(-2u)) (= 0.5 x (1 + tanh u))."""
    x = _edge_and_f16(np.random.default_rng(12))
    got = reference_ops.gelu(x, "tanh")
    with np.errstate(over="ignore", invalid="ignore"):
        v = x.astype(np.float64)
        want = v / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
        assert np.allclose(want[np.abs(v) < 3], (0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))))[np.abs(v) < 3], rtol=1e-12, atol=1e-15)
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero((_ulps32(got, want) > 1) & (np.abs(got - want) > 2.0 ** -140) & np.isfinite(v))
    assert got.dtype == np.float32 and not len(bad), [(x[i], got[i], want[i]) for i in bad[:5]]


def _softmax_whole(x, scale, v):
    """numpy's whole-array softmax in float64 (its exp, its sums), x's width after."""
    out = np.zeros(x.shape, np.float64)
    e = (x[:, :v] * scale).astype(x.dtype).astype(np.float64)   # a float64 scale: the product in float64, then x's width
    e = e - e.max(1, keepdims=True)
    e = np.exp(e)
    out[:, :v] = e / e.sum(1, keepdims=True)
    return out


def _same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_softmax_is_numpys_float64_softmax_rounded():
    """float32 within a float32 ulp of numpy's float64 softmax, float64 within 1e-14; NaN
    rows (a NaN, a +inf) where numpy's are; masked columns +0; f16=True its f16 rounding."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((300, 730)) * 4).astype(np.float16).astype(np.float32)   # attention's width
    assert _ulps32(reference_ops.softmax(x, 1.0, 729), _softmax_whole(x, 1.0, 729)).max() <= 1
    for dt in (np.float32, np.float64):
        x = (rng.standard_normal((700, 301)) * 6).astype(dt)
        x[3, 7], x[4, :] = np.inf, -np.inf
        x[5, 9], x[6, 0], x[7, 2] = np.nan, 1e30, -0.0
        for scale, v in ((1.0, 0), (0.125, 300), (np.float64(0.11785113019775793), 299)):
            with np.errstate(invalid="ignore", over="ignore"):
                want = _softmax_whole(x, scale, v or 301)
                got = reference_ops.softmax(x, scale, v)
                r = reference_ops.softmax(x, scale, v, f16=True)
            assert got.dtype == r.dtype == dt
            assert (np.isnan(got) == np.isnan(want)).all()
            if dt == np.float32:
                assert _ulps32(got, want).max() <= 1
            else:
                ok = ~np.isnan(want)
                np.testing.assert_allclose(got[ok], want[ok], rtol=1e-14, atol=1e-300)
            with np.errstate(over="ignore"):
                assert _same_bits(r, got.astype(np.float16).astype(dt))


def _matmul_by_blocks(op, a, b):
    """The op as a loop of plain products placed into a zero output and scaled after."""
    m, k, n = op.attr("m"), op.attr("k"), op.attr("n")
    groups = op.attr("groups")
    out = np.zeros((max(g[4] for g in groups) + m, max(g[5] for g in groups) + n), np.float32)
    for ar, ac, br, bc, cr, cc in groups:
        bb = b[br:br + n, bc:bc + k].T if op.attr("transpose_b", False) else b[br:br + k, bc:bc + n]
        out[cr:cr + m, cc:cc + n] = reference_ops.dot(a[ar:ar + m, ac:ac + k], bb)
    out *= op.attr("scale", 1.0)
    return out


def test_grouped_matmul_writes_blocks_in_place():
    """Attention's shapes in small: scores (row blocks, transposed b, scale), P.V (column
    blocks, a long k), and groups that leave part of the output zero."""
    rng = np.random.default_rng(9)
    h, t, d = 4, 37, 24
    qkv = rng.standard_normal((t, 3 * h * d)).astype(np.float16).astype(np.float32)
    scores = Op("matmul", ("qkv", "qkv"), ("s",), tuple(sorted({
        "m": t, "n": t, "k": d, "transpose_b": True, "scale": np.float64(d ** -0.5),
        "groups": tuple((0, i * d, 0, h * d + i * d, i * t, 0) for i in range(h))}.items())))
    probs = rng.random((h * t, 600)).astype(np.float32)
    v = rng.standard_normal((600, h * d)).astype(np.float32)
    pv = Op("matmul", ("p", "v"), ("o",), tuple(sorted({
        "m": t, "n": d, "k": 600, "groups": tuple((i * t, 0, 0, i * d, 0, i * d) for i in range(h))}.items())))
    sparse = Op("matmul", ("p", "v"), ("o",), tuple(sorted({
        "m": t, "n": d, "k": 600, "scale": -2.0, "groups": ((0, 0, 0, 0, 0, 0), (t, 0, 0, d, 2 * t, d))}.items())))
    for op, a, b in ((scores, qkv, qkv), (pv, probs, v), (sparse, probs, v)):
        want = _matmul_by_blocks(op, a, b)
        assert _same_bits(reference_ops.matmul(op, a, b), want)
        with np.errstate(over="ignore"):
            assert _same_bits(reference_ops.matmul(op, a, b, f16=True), want.astype(np.float16).astype(np.float32))


def test_two_evaluations_sharing_weights_are_each_alone():
    """The rounded and unrounded evaluations on two threads taking each FP8 weight member
    from the other (`_Shared`, with room for every member or none) give the bits each gives
    alone and leave nothing behind; a member handed over is read-only."""
    import threading
    from compiler.models import vit
    g, data = vit.build(dict(name="vit", preset="custom", width=64, hidden=172, heads=2, image=56,
                             patch=14, layers=3, gelu="erf"))
    assert g.repeat and g.repeat.sequences
    keep = {t.name for t in g.of_kind("output")}
    alone = [reference.outputs(g, reference.evaluate(g, data, r, keep)) for r in (True, False)]
    for cap in (1 << 30, 0):
        shared = reference._Shared(cap)
        got = [None, None]

        def run(j):
            got[j] = reference.outputs(g, reference.evaluate(g, data, j == 0, keep, None, shared))
        ts = [threading.Thread(target=run, args=(j,)) for j in (0, 1)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for want, have in zip(alone, got):
            assert want.keys() == have.keys() and all(_same_bits(want[k], have[k]) for k in want)
        assert shared.held == 0 and not shared.vals        # every member handed over or made twice
    s = reference._Shared()
    name = g.repeat.sequences[0]
    first = s.value(g, data, name, 1)
    assert not first.flags.writeable and s.held == first.nbytes
    assert s.value(g, data, name, 1) is first and s.held == 0 and not s.vals

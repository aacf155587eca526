"""The reference's own f16 rounding (one compiled pass over float32, in place) gives
numpy's cast to float16 and back on every binade's ties and near-ties, the specials and
a random sample (all 2**32 values: experiments/host_time/f16_exhaustive.py)."""
import math

import numpy as np

from compiler import reference
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
    reference._round_f32_inplace(got)
    bad = np.flatnonzero(got != want)
    assert not len(bad), [(hex(bits[i]), hex(want[i]), hex(got[i])) for i in bad[:5]]


def test_round_fresh_keeps_width_and_values():
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65519.0, 65520.0, -2.0 ** -25, 2.0 ** -24 * 1.5, np.nan])
    for dt in (np.float32, np.float64):
        y = reference._round_fresh(x.astype(dt))
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


def test_gelu_erf_by_table_is_math_erf_per_element():
    x = _edge_and_f16(np.random.default_rng(11))
    got = reference.gelu(x, "erf")
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.array([0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x.astype(float).tolist()], np.float32)
    assert got.dtype == np.float32
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    bad = np.flatnonzero(~same)
    assert not len(bad), [(x[i], got[i], want[i]) for i in bad[:5]]
    big = np.resize(x, reference.GELU_SPLIT + 3)          # in two halves on two threads
    want = np.empty_like(big)
    reference._gelu_erf(big, want)
    assert reference.gelu(big, "erf").view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
    x64 = EDGE.astype(np.float64)              # float64 inputs (read-back) keep the direct path
    np.testing.assert_array_equal(reference.gelu(x64, "erf"),
                                  [0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x64.tolist()])


def _softmax_whole(x, scale, v):
    out = np.zeros_like(x)
    e = (x[:, :v] * scale).astype(x.dtype)       # a float64 scale: the product in float64, then x's width
    e = e - e.max(1, keepdims=True)
    e = np.exp(e)
    out[:, :v] = e / e.sum(1, keepdims=True)
    return out


def _same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_blocked_softmax_is_whole_array_softmax():
    """float32: the compiled passes around numpy's exp and sums (NaN and inf rows: numpy's
    own path for their block); float64 (read-back): numpy's alone."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((300, 730)) * 4).astype(np.float16).astype(np.float32)   # attention's width
    assert _same_bits(reference.softmax(x, 1.0, 729), _softmax_whole(x, 1.0, 729))
    for dt in (np.float32, np.float64):
        x = (rng.standard_normal((700, 301)) * 6).astype(dt)          # several blocks, a short last one
        x[3, 7], x[4, :] = np.inf, -np.inf
        x[5, 9], x[6, 0], x[7, 2] = np.nan, 1e30, -0.0
        for scale, v in ((1.0, 0), (0.125, 300), (np.float64(0.11785113019775793), 299)):
            with np.errstate(invalid="ignore"):
                want = _softmax_whole(x, scale, v or 301)
                assert _same_bits(reference.softmax(x, scale, v), want)
                r = reference.softmax(x, scale, v, f16=True)
            assert r.dtype == dt
            with np.errstate(over="ignore"):
                assert _same_bits(r, want.astype(np.float16).astype(dt))


def _matmul_by_blocks(op, a, b):
    """The op as a loop of plain products placed into a zero output and scaled after."""
    m, k, n = op.attr("m"), op.attr("k"), op.attr("n")
    groups = op.attr("groups")
    out = np.zeros((max(g[4] for g in groups) + m, max(g[5] for g in groups) + n), np.float32)
    for ar, ac, br, bc, cr, cc in groups:
        bb = b[br:br + n, bc:bc + k].T if op.attr("transpose_b", False) else b[br:br + k, bc:bc + n]
        out[cr:cr + m, cc:cc + n] = reference.dot(a[ar:ar + m, ac:ac + k], bb)
    out *= op.attr("scale", 1.0)
    return out


def test_grouped_matmul_writes_blocks_in_place():
    """Attention's shapes in small: scores (row blocks, transposed b, scale), P.V (column
    blocks, k over several K_BLOCKs), and groups that leave part of the output zero."""
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
        assert _same_bits(reference.matmul(op, a, b), want)
        with np.errstate(over="ignore"):
            assert _same_bits(reference.matmul(op, a, b, f16=True), want.astype(np.float16).astype(np.float32))


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

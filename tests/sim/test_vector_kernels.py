"""The ISA's newer kernels against independent numpy references (float64 math):
GELU (tanh, erf), LAYERNORM, SOFTMAX (extreme rows), CAST round trip,
ROWSCALE, MATMUL transposed / micro-panel / mixed dtypes, and ONLINE_SOFTMAX + ROWSCALE
building full attention. Several tiles per kernel, with shared and differing
addresses (one batched gather vs a gathered index: identical bytes)."""
import math

import ml_dtypes
import numpy as np
import pytest

from compiler import exact, isa, sim  # exact: MATMUL sums exactly, rounds once (tests/test_exact.py)
from compiler.sim import fmath

from .asm import R0_DATA, R0_DATA2, R1, R1_B, Asm

FP8 = ml_dtypes.float8_e4m3fn
TILES = [0, 1, 2, 5, 17, 40]
F16_TINY = 2.0 ** -24


def _off(shared):
    return (lambda t: 0) if shared else (lambda t: 64 * (t % 5))


def _load(a, name, addr_of, arrays, tiles=TILES):
    """Host-load arrays[i] on tiles[i] at addr_of(tile); returns the stream bytes."""
    bufs = [np.ascontiguousarray(x).view(np.uint8).reshape(-1) for x in arrays]
    rows, o = [], 0
    for t, b in zip(tiles, bufs):
        rows.append((o, t, addr_of(t), len(b), 1, len(b), len(b)))
        o += len(b)
    a.stream_in(name, rows)
    return np.concatenate(bufs)


def _unload(a, name, addr_of, nbytes, tiles=TILES):
    a.stream_out(name, nbytes * len(tiles),
                 [(i * nbytes, t, addr_of(t), nbytes, 1, nbytes, nbytes) for i, t in enumerate(tiles)])


def _close(got, ref, rtol=2e-3, atol=F16_TINY):
    got = np.asarray(got, np.float64)
    assert np.all(np.isnan(got) == np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(got[ok], ref[ok], rtol=rtol, atol=atol)


def _run_both(build):
    """Build with shared and with differing addresses: outputs and cycles identical."""
    res = [sim.run(*build(_off(sh))) for sh in (True, False)]
    for n in res[0].outputs:
        assert np.array_equal(res[0].outputs[n], res[1].outputs[n]), n
    assert np.array_equal(res[0].tile_cycles, res[1].tile_cycles)
    return res[0]


def _f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


# ---- GELU ------------------------------------------------------------------------------
def _gelu_ref(x, erf_form):
    x = x.astype(np.float64)
    if erf_form:
        return np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.reshape(-1)]).reshape(x.shape)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def test_erf_approximation_against_math_erf():
    x = np.linspace(-9, 9, 36001).astype(np.float32)
    ref = np.array([math.erf(float(v)) for v in x])
    assert np.abs(fmath.erf(x) - ref).max() < 5e-7
    z = np.linspace(0, 9, 9001).astype(np.float32)        # erfc keeps a relative bound in the tail
    rc = np.array([math.erfc(float(v)) for v in z])
    assert (np.abs(fmath.erfc_pos(z) - rc) / rc).max() < 1e-5


def test_gelu_tanh_and_erf_forms():
    rng = np.random.default_rng(1)
    n = 1000
    X = [_f16(rng, n, 3.0) for _ in TILES]
    X[0][:6] = X[1][:6] = [0, -0.0, 60000, -60000, -12, 1e-7]

    def build(off):
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA + off(t), X)}
        for i, t in enumerate(TILES):     # odd positions: erf form (two groups in one round)
            a.on(t, isa.GELU, R1 + off(t), R0_DATA + off(t), n, flags=isa.F_ERF if i % 2 else 0)
        a.sync()
        _unload(a, "y", lambda t: R1 + off(t), 2 * n)
        return a.build(), s

    res = _run_both(build)
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), n)
    for i, t in enumerate(TILES):
        _close(Y[i], _gelu_ref(X[i], bool(i % 2)))
        assert res.tile_cycles[0, t] == Asm().t.gelu_cycles(n)
    assert Y[0, 2] == 60000 and Y[0, 3] == 0 and Y[1, 3] == 0


# ---- LAYERNORM -------------------------------------------------------------------------
def _ln_ref(x, g, b, eps):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g.astype(np.float64) + b.astype(np.float64)


def test_layernorm_with_extreme_rows():
    rng = np.random.default_rng(2)
    rows, cols, eps = 6, 96, 1e-5
    X = [_f16(rng, (rows, cols), 2.0) + np.float16(i) for i in range(len(TILES))]
    X[0][0] = 3.0                                    # constant row: out = beta
    X[0][1] = _f16(rng, cols, 20000.0)               # huge values (squares far beyond f16)
    X[0][2] = _f16(rng, cols, 1e-3)                  # tiny spread, below sqrt(eps)
    X[0][3, ::2], X[0][3, 1::2] = 65504, -65504      # extremes of f16
    G = [_f16(rng, cols) for _ in TILES]
    B = [_f16(rng, cols) for _ in TILES]

    def build(off):
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA + off(t), X),
             "g": _load(a, "g", lambda t: R0_DATA2 + off(t), G),
             "b": _load(a, "b", lambda t: R0_DATA2 + 512 + off(t), B)}
        for t in TILES:
            a.on(t, isa.LAYERNORM, R1 + off(t), R0_DATA + off(t), R0_DATA2 + off(t), R0_DATA2 + 512 + off(t),
                 rows, cols, isa.f32_bits(eps))
        a.sync()
        _unload(a, "y", lambda t: R1 + off(t), 2 * rows * cols)
        return a.build(), s

    res = _run_both(build)
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), rows, cols)
    for i, t in enumerate(TILES):
        _close(Y[i], _ln_ref(X[i], G[i], B[i], eps), rtol=4e-3, atol=4e-3)
        assert res.tile_cycles[0, t] == Asm().t.layernorm_cycles(rows, cols)
    assert np.array_equal(Y[0, 0], B[0])


# ---- SOFTMAX ---------------------------------------------------------------------------
def _softmax_ref(x, scale):
    s = x.astype(np.float64) * scale
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_softmax_with_extreme_rows():
    rng = np.random.default_rng(3)
    rows, cols, scale = 8, 200, 0.125
    X = [_f16(rng, (rows, cols), 4.0) for _ in TILES]
    X[0][0] = 7.0                                    # uniform
    X[0][1, :] = -65504; X[0][1, 17] = 65504         # one dominant entry: one-hot
    X[0][2, :] = 65504                               # all at the top of f16
    X[0][3, : cols // 2] = -np.inf                   # masked half
    X[0][4] = _f16(rng, cols, 3000.0)                # scores spanning ~1e3 after scaling

    def build(off):
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA + off(t), X)}
        for t in TILES:
            a.on(t, isa.SOFTMAX, R1 + off(t), R0_DATA + off(t), rows, cols, isa.f32_bits(scale))
        a.sync()
        _unload(a, "y", lambda t: R1 + off(t), 2 * rows * cols)
        return a.build(), s

    res = _run_both(build)
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), rows, cols)
    for i, t in enumerate(TILES):
        _close(Y[i], _softmax_ref(X[i], scale), rtol=3e-3, atol=2 * F16_TINY)
        assert res.tile_cycles[0, t] == Asm().t.softmax_cycles(rows, cols)
    assert Y[0, 1, 17] == 1 and Y[0, 1].sum() == 1
    assert not Y[0, 3, : cols // 2].any()


# ---- CAST ------------------------------------------------------------------------------
def test_cast_round_trip_and_saturation():
    rng = np.random.default_rng(4)
    n, scale = 512, 0.5
    X = [_f16(rng, n, 40.0) for _ in TILES]
    X[0][:5] = [1000, -1000, np.inf, -np.inf, 224.0]   # beyond +-448*scale: saturate to +-448
    X[0][5] = np.nan

    def build(off):
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA + off(t), X)}
        for t in TILES:
            a.on(t, isa.CAST, R1 + off(t), R0_DATA + off(t), n, isa.f32_bits(scale), dtype="fp8", dtype2="f16")
        a.sync()
        for t in TILES:
            a.on(t, isa.CAST, R1_B + off(t), R1 + off(t), n, isa.f32_bits(scale), dtype="f16", dtype2="fp8")
        a.sync()
        _unload(a, "q", lambda t: R1 + off(t), n)
        _unload(a, "y", lambda t: R1_B + off(t), 2 * n)
        return a.build(), s

    res = _run_both(build)
    Q = res.outputs["q"].view(FP8).reshape(len(TILES), n)
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), n)
    for i, t in enumerate(TILES):
        x = X[i].astype(np.float64) / scale
        q_ref = np.clip(x, -448, 448).astype(np.float32).astype(FP8)
        assert np.array_equal(Q[i].view(np.uint8), q_ref.view(np.uint8))
        y_ref = (q_ref.astype(np.float64) * scale).astype(np.float16)
        assert np.array_equal(Y[i].view(np.uint16), y_ref.view(np.uint16))
        ok = np.abs(x) <= 448
        _close(Y[i][ok], X[i][ok].astype(np.float64), rtol=2 ** -3, atol=2 ** -9 * scale)
        c = Asm().t
        assert res.tile_cycles[0, t] == c.cast_cycles(n, 2, 1) and res.tile_cycles[1, t] == c.cast_cycles(n, 1, 2)
    assert Q[0, :5].astype(np.float32).tolist() == [448, -448, 448, -448, 448] and np.isnan(Q[0, 5])


# ---- ROWSCALE --------------------------------------------------------------------------
@pytest.mark.parametrize("flags", [0, isa.F_RECIP, isa.F_ADD, isa.F_RECIP | isa.F_ADD])
def test_rowscale(flags):
    rng = np.random.default_rng(5 + flags)
    rows, cols = 12, 40
    S0 = [_f16(rng, (rows, cols)) for _ in TILES]
    S1 = [_f16(rng, (rows, cols)) for _ in TILES]
    V = [(rng.random(rows) * 4 + 0.25).astype(np.float32) for _ in TILES]

    def build(off):
        a = Asm()
        s = {"s0": _load(a, "s0", lambda t: R0_DATA + off(t), S0),
             "s1": _load(a, "s1", lambda t: R1 + off(t), S1),
             "v": _load(a, "v", lambda t: R0_DATA2 + off(t), V)}
        for t in TILES:
            a.on(t, isa.ROWSCALE, R1_B + off(t), R0_DATA + off(t), R0_DATA2 + off(t),
                 R1 + off(t) if flags & isa.F_ADD else 0, rows, cols, flags=flags)
        a.sync()
        _unload(a, "y", lambda t: R1_B + off(t), 2 * rows * cols)
        return a.build(), s

    res = _run_both(build)
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), rows, cols)
    for i, t in enumerate(TILES):
        v = V[i].astype(np.float64)
        v = 1 / v if flags & isa.F_RECIP else v
        ref = S0[i].astype(np.float64) * v[:, None] + (S1[i].astype(np.float64) if flags & isa.F_ADD else 0)
        _close(Y[i], ref, atol=2e-3)
        assert res.tile_cycles[0, t] == Asm().t.rowscale_cycles(rows, cols, flags & isa.F_ADD, flags & isa.F_RECIP)


# ---- MATMUL: transposed b, micro-panel b, mixed dtypes -------------------------------------
# (b dtype, a dtype, b layout): fp8 b is read only as micro-panels on these targets,
# so it is never plain or transposed (test_panels covers those refusals)
MM_CASES = [("f16", None, "row"), ("f16", None, "T"), ("fp8", "f16", "panel"), ("f16", "fp8", "T"),
            ("fp8", None, "panel"), ("fp8", "fp8", "panel")]
MM_FLAGS = {"row": 0, "T": isa.F_TRANSPOSE_B, "panel": isa.F_PANEL_B}


def test_matmul_transpose_and_mixed_dtypes():
    rng = np.random.default_rng(6)
    m, k, n, scale = 8, 48, 24, 0.25          # k = 48: one full 32-panel and a partial one
    np_dt = {"f16": np.float16, "fp8": FP8}
    cases = [MM_CASES[i % len(MM_CASES)] for i in range(len(TILES))]
    P = Asm().t.amp_panel_elems["fp8"]
    A, B, stored = [], [], []
    for db, da, lay in cases:
        A.append(rng.standard_normal((m, k)).astype(np_dt[da or db]))
        B.append(rng.standard_normal((n, k) if lay == "T" else (k, n)).astype(np_dt[db]))
        stored.append(isa.panel_order(B[-1], P) if lay == "panel" else B[-1])
    tr = [lay == "T" for _, _, lay in cases]

    def build(off):
        a = Asm()
        s = {"a": _load(a, "a", lambda t: R0_DATA + off(t), A), "b": _load(a, "b", lambda t: R1 + off(t), stored)}
        for (db, da, lay), t in zip(cases, TILES):
            a.matmul(t, R0_DATA + off(t), R1 + off(t), R0_DATA2 + off(t), m, k, n, scale=scale,
                     dtype=db, dtype2=da, flags=MM_FLAGS[lay])
        a.sync()
        _unload(a, "o", lambda t: R0_DATA2 + off(t), 2 * m * n)
        return a.build(), s

    res = _run_both(build)
    O = res.outputs["o"].view(np.float16).reshape(len(TILES), m, n)
    for i, ((db, da, lay), t) in enumerate(zip(cases, TILES)):
        b = B[i].astype(np.float32)
        ref = (exact.matmul_f32(A[i].astype(np.float32), (b.T if tr[i] else b)) * np.float32(scale)).astype(np.float16)
        assert np.array_equal(O[i], ref), (db, da, lay)
        assert res.tile_cycles[0, t] == Asm().t.matmul_cycles(m, k, n, db, da or db)
    assert Asm().t.matmul_cycles(m, k, n, "fp8", "f16") == Asm().t.matmul_cycles(m, k, n, "f16")


# ---- ONLINE_SOFTMAX + ROWSCALE = attention ----------------------------------------------------
def test_online_softmax_attention_over_three_key_blocks():
    """O = softmax(Q K^T * scale) V, key blocks of 32: per block S = Q K_j^T (MATMUL,
    transposed b), P = ONLINE_SOFTMAX(S) updating (m, l, c), O = O * c + P V_j
    (MATMUL, ROWSCALE add); finally O = O / l (ROWSCALE recip)."""
    rng = np.random.default_rng(7)
    r, d, kb, nb = 16, 32, 32, 3
    scale = 1 / math.sqrt(d)
    tiles = [3, 4, 9, 62]
    Q = [_f16(rng, (r, d), 2.0) for _ in tiles]
    Kt = [_f16(rng, (nb * kb, d), 2.0) for _ in tiles]
    V = [_f16(rng, (nb * kb, d)) for _ in tiles]
    Q[0][0] = 0                                      # a row of equal scores
    Kt[1][kb:2 * kb] *= np.float16(4)                 # the middle block dominates some rows
    QA, S, P, PV, O, ST = R0_DATA, R0_DATA + 2048, R0_DATA + 4096, R0_DATA2, R0_DATA2 + 2048, R0_DATA2 + 4096
    KA, VA = R1, R1_B
    a = Asm()
    s = {"q": _load(a, "q", lambda t: QA, Q, tiles), "k": _load(a, "k", lambda t: KA, Kt, tiles),
         "v": _load(a, "v", lambda t: VA, V, tiles)}
    for j in range(nb):
        a.matmul(tiles, QA, KA + j * kb * d * 2, S, r, d, kb, flags=isa.F_TRANSPOSE_B)
        a.on(tiles, isa.ONLINE_SOFTMAX, P, S, ST, r, kb, isa.f32_bits(scale), flags=isa.F_FIRST if j == 0 else 0)
        a.matmul(tiles, P, VA + j * kb * d * 2, PV, r, kb, d)
        a.on(tiles, isa.ROWSCALE, O, O, ST + 8 * r, PV, r, d, flags=isa.F_ADD)
        a.sync()
    a.on(tiles, isa.ROWSCALE, O, O, ST + 4 * r, 0, r, d, flags=isa.F_RECIP)
    a.sync()
    _unload(a, "o", lambda t: O, 2 * r * d, tiles)
    _unload(a, "st", lambda t: ST, 12 * r, tiles)
    res = sim.run(a.build(), s)
    out = res.outputs["o"].view(np.float16).reshape(len(tiles), r, d)
    st = res.outputs["st"].view(np.float32).reshape(len(tiles), 3, r)
    for i in range(len(tiles)):
        sc = Q[i].astype(np.float64) @ Kt[i].astype(np.float64).T * scale
        ref = _softmax_ref(sc, 1.0) @ V[i].astype(np.float64)
        _close(out[i], ref, rtol=1e-2, atol=1e-2)           # P and O are rounded to f16 per block
        assert np.abs(out[i] - ref).mean() < 2e-3
        s16 = (Q[i].astype(np.float64) @ Kt[i].astype(np.float64).T).astype(np.float16).astype(np.float64) * scale
        np.testing.assert_allclose(st[i, 0], s16.max(-1), rtol=1e-6)                      # running max
        np.testing.assert_allclose(st[i, 1], np.exp(s16 - s16.max(-1, keepdims=True)).sum(-1), rtol=2e-3)  # l
    t = a.t
    per_block = (t.matmul_cycles(r, d, kb, "f16") + t.online_softmax_cycles(r, kb)
                 + t.matmul_cycles(r, kb, d, "f16") + t.rowscale_cycles(r, d, True, False))
    assert res.tile_cycles[:3, tiles[0]].tolist() == [per_block] * 3
    assert res.tile_cycles[3, tiles[0]] == t.rowscale_cycles(r, d, False, True)


def test_online_softmax_fully_masked_rows_stay_finite():
    """Rows whose scores are all -inf so far: out 0, l 0, c 0, m -inf (no NaN)."""
    r, c = 4, 16
    X = np.zeros((r, c), np.float16)
    X[:2] = -np.inf
    a = Asm()
    s = {"x": _load(a, "x", lambda t: R0_DATA, [X, X], [0, 1])}
    a.on([0, 1], isa.ONLINE_SOFTMAX, R1, R0_DATA, R0_DATA2, r, c, isa.f32_bits(1.0), flags=isa.F_FIRST)
    a.sync()
    a.on(1, isa.ONLINE_SOFTMAX, R1, R0_DATA, R0_DATA2, r, c, isa.f32_bits(1.0))   # a second block
    a.sync()
    _unload(a, "p", lambda t: R1, 2 * r * c, [0, 1])
    _unload(a, "st", lambda t: R0_DATA2, 12 * r, [0, 1])
    res = sim.run(a.build(), s)
    p = res.outputs["p"].view(np.float16).reshape(2, r, c)
    st = res.outputs["st"].view(np.float32).reshape(2, 3, r)
    assert not p[:, :2].any() and (p[:, 2:] == 1).all()
    assert st[0, 0].tolist() == [-np.inf, -np.inf, 0, 0] and st[0, 1].tolist() == [0, 0, c, c]
    assert st[0, 2].tolist() == [0] * 4                                     # first block: c = 0
    assert st[1, 2].tolist() == [0, 0, 1, 1] and st[1, 1].tolist() == [0, 0, 2 * c, 2 * c]


def test_results_do_not_depend_on_batching(monkeypatch):
    """Every kernel on six tiles at once vs one tile per numpy call (BATCH_BYTES = 1):
    identical bytes (row reductions never mix tiles)."""
    from compiler.sim import kernels
    rng = np.random.default_rng(9)
    r, c = 8, 64
    X = [_f16(rng, (r, c), 3.0) for _ in TILES]
    G = [_f16(rng, c) for _ in TILES]
    V = [(rng.random(r) + 0.5).astype(np.float32) for _ in TILES]
    Bm = [_f16(rng, (c, c)) for _ in TILES]

    def build():
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA, X), "g": _load(a, "g", lambda t: R0_DATA2, G),
             "v": _load(a, "v", lambda t: R0_DATA2 + 512, V), "b": _load(a, "b", lambda t: R1_B, Bm)}
        one = isa.f32_bits(1.0)
        a.on(TILES, isa.LAYERNORM, R1, R0_DATA, R0_DATA2, R0_DATA2, r, c, isa.f32_bits(1e-5))
        a.on(TILES, isa.GELU, R1 + 1024, R1, r * c, flags=isa.F_ERF)
        a.on(TILES, isa.GELU, R1 + 2048, R1, r * c)
        a.on(TILES, isa.SOFTMAX, R1 + 3072, R0_DATA, r, c, isa.f32_bits(0.3))
        a.on(TILES, isa.ONLINE_SOFTMAX, R1 + 4096, R0_DATA, R0_DATA2 + 1024, r, c, one, flags=isa.F_FIRST)
        a.on(TILES, isa.ONLINE_SOFTMAX, R1 + 5120, R1, R0_DATA2 + 1024, r, c, one)
        a.on(TILES, isa.ROWSCALE, R1 + 6144, R1 + 5120, R0_DATA2 + 512, R1, r, c, flags=3)
        a.on(TILES, isa.CAST, R1 + 7168, R1 + 6144, r * c, isa.f32_bits(0.25), dtype="fp8", dtype2="f16")
        a.matmul(TILES, R1 + 3072, R1_B, R1 + 8192, r, c, c, dtype="f16", flags=isa.F_TRANSPOSE_B)
        a.sync()
        _unload(a, "o", lambda t: R1, 9216)
        _unload(a, "st", lambda t: R0_DATA2 + 1024, 12 * r)
        return a.build(), s

    whole = sim.run(*build())
    monkeypatch.setattr(kernels, "BATCH_BYTES", 1)
    single = sim.run(*build())
    for n in ("o", "st"):
        assert np.array_equal(whole.outputs[n], single.outputs[n]), n
    assert np.isfinite(whole.outputs["o"][:7168].view(np.float16)).all()


@pytest.mark.parametrize("seed", [11, 12])
def test_random_shapes_per_tile(seed):
    """Each tile its own random shape (several shape groups in one round, and
    tiles sharing a shape batched together), every kernel against numpy."""
    rng = np.random.default_rng(seed)
    tiles = list(range(0, 64, 5))
    shp = {t: (int(rng.integers(1, 4)) * 2, int(rng.integers(1, 5)) * 8) for t in tiles}
    shp[tiles[1]] = shp[tiles[0]]                        # at least one shared group
    X = [_f16(rng, shp[t], 3.0) for t in tiles]
    G = [_f16(rng, shp[t][1]) for t in tiles]
    Bt = [_f16(rng, (shp[t][1], shp[t][1])) for t in tiles]     # [n, k] with n = k = cols
    sc = [float(rng.choice([0.125, 0.5, 1.0])) for t in tiles]
    OUT = {k: R1 + 2048 * i for i, k in enumerate(["ln", "ge", "gt", "sm", "os", "rs", "mm"])}
    a = Asm()
    s = {"x": _load(a, "x", lambda t: R0_DATA, X, tiles), "g": _load(a, "g", lambda t: R0_DATA2, G, tiles),
         "b": _load(a, "b", lambda t: R1_B + 8192, Bt, tiles)}
    for i, t in enumerate(tiles):
        r, c = shp[t]
        a.on(t, isa.LAYERNORM, OUT["ln"], R0_DATA, R0_DATA2, R0_DATA2, r, c, isa.f32_bits(1e-5))
        a.on(t, isa.GELU, OUT["ge"], R0_DATA, r * c, flags=isa.F_ERF)
        a.on(t, isa.GELU, OUT["gt"], R0_DATA, r * c)
        a.on(t, isa.SOFTMAX, OUT["sm"], R0_DATA, r, c, isa.f32_bits(sc[i]))
        a.on(t, isa.ONLINE_SOFTMAX, OUT["os"], R0_DATA, R0_DATA2 + 512, r, c, isa.f32_bits(sc[i]), flags=isa.F_FIRST)
        a.on(t, isa.ROWSCALE, OUT["rs"], OUT["os"], R0_DATA2 + 512 + 4 * r, 0, r, c, flags=isa.F_RECIP)
        a.matmul(t, R0_DATA, R1_B + 8192, OUT["mm"], r, c, c, scale=sc[i], flags=isa.F_TRANSPOSE_B)
    a.sync()
    for k, addr in OUT.items():
        _unload(a, k, lambda t, addr=addr: addr, 2048, tiles)
    res = sim.run(a.build(), s)
    for i, t in enumerate(tiles):
        r, c = shp[t]
        got = {k: res.outputs[k][i * 2048:][:2 * r * c].view(np.float16).reshape(r, c) for k in OUT}
        x = X[i]
        _close(got["ln"], _ln_ref(x, G[i], G[i], 1e-5), rtol=4e-3, atol=4e-3)
        _close(got["ge"], _gelu_ref(x, True))
        _close(got["gt"], _gelu_ref(x, False))
        _close(got["sm"], _softmax_ref(x, sc[i]), rtol=3e-3, atol=2 * F16_TINY)
        _close(got["rs"], _softmax_ref(x, sc[i]), rtol=3e-3, atol=2 * F16_TINY)   # exp / l = softmax
        mm = (exact.matmul_f32(x.astype(np.float32), Bt[i].astype(np.float32).T) * np.float32(sc[i])).astype(np.float16)
        assert np.array_equal(got["mm"], mm)
        t_ = a.t
        expect = (t_.layernorm_cycles(r, c) + 2 * t_.gelu_cycles(r * c) + t_.softmax_cycles(r, c, sc[i] != 1.0)
                  + t_.online_softmax_cycles(r, c) + t_.rowscale_cycles(r, c, False, True) + t_.matmul_cycles(r, c, c, "f16"))
        assert res.tile_cycles[0, t] == expect


def _softmax_build(X, r, c, scales, valid):
    """A build(off) for _run_both: tile TILES[i] runs SOFTMAX of X[i] (r x c) at scales[i],
    valid[i] columns (0: all), into y."""
    def build(off):
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA + off(t), X)}
        for sc, v, t in zip(scales, valid, TILES):
            a.on(t, isa.SOFTMAX, R1 + off(t), R0_DATA + off(t), r, c, isa.f32_bits(sc), v)
        a.sync()
        _unload(a, "y", lambda t: R1 + off(t), 2 * r * c)
        return a.build(), s
    return build


def test_softmax_valid_columns():
    """SOFTMAX word 6 = valid: softmax over the first `valid` columns (masked padding
    keys), zeros after them; 0 means every column; more than cols is refused."""
    rng = np.random.default_rng(13)
    r, c, scale = 4, 24, 0.5
    X = [_f16(rng, (r, c), 2.0) for _ in TILES]
    valid = [0, 24, 1, 17, 17, 5]
    res = _run_both(_softmax_build(X, r, c, [scale] * len(TILES), valid))
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), r, c)
    for i, (v, t) in enumerate(zip(valid, TILES)):
        v = v or c
        ref = np.zeros((r, c))
        ref[:, :v] = _softmax_ref(X[i][:, :v], scale)
        _close(Y[i], ref, rtol=3e-3, atol=2 * F16_TINY)
        assert not Y[i][:, v:].view(np.uint16).any()
        assert res.tile_cycles[0, t] == Asm().t.softmax_cycles(r, c)
    assert (Y[2][:, 0] == 1).all()
    a = Asm()
    a.on(3, isa.SOFTMAX, R1, R0_DATA, r, c, isa.f32_bits(1.0), c + 1).sync()
    with pytest.raises(sim.MachineFault, match="SOFTMAX valid = 25 exceeds cols = 24"):
        sim.run(a.build(), {})


# ---- BIAS --------------------------------------------------------------------------------
def test_bias_adds_a_row_to_every_row():
    rng = np.random.default_rng(7)
    r, c = 5, 24
    X = [_f16(rng, (r, c)) for _ in TILES]
    Bs = [_f16(rng, c) for _ in TILES]

    def build(off):
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA + off(t), X),
             "b": _load(a, "b", lambda t: R0_DATA2 + off(t), Bs)}
        for t in TILES:
            a.on(t, isa.BIAS, R1 + off(t), R0_DATA + off(t), R0_DATA2 + off(t), r, c)
        a.sync()
        _unload(a, "y", lambda t: R1 + off(t), 2 * r * c)
        return a.build(), s

    res = _run_both(build)
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), r, c)
    for i, t in enumerate(TILES):
        want = (X[i].astype(np.float64) + Bs[i].astype(np.float64)).astype(np.float16)
        assert np.array_equal(Y[i], want)                 # one f32 add, one rounding: exact
        assert res.tile_cycles[0, t] == Asm().t.bias_cycles(r, c)


def test_softmax_at_scale_one_costs_no_multiply():
    """A SOFTMAX whose scale word is 1.0 (an attention's score MATMUL already applied 1/sqrt(d))
    is charged no BroadcastScalar1D MULTIPLY, by the simulator and the oracle alike (_run_both);
    any other scale is, and 1.0 changes no byte of the output."""
    from compiler.costs import vertices
    rng = np.random.default_rng(21)
    r, c = 8, 729
    X = [_f16(rng, (r, c), 4.0) for _ in TILES]
    scales = [1.0, 0.5, 1.0, 2.0, 1.0, 0.125]
    res = _run_both(_softmax_build(X, r, c, scales, [0] * len(TILES)))
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), r, c)
    t_ = Asm().t
    mul = int(vertices.broadcast_scalar_1d_cycles(r * c, vertices.PERF[("MULTIPLY", "f16")], 2, t_.workers,
                                                  t_.vector_bytes_per_cycle))
    for i, (sc, t) in enumerate(zip(scales, TILES)):
        _close(Y[i], _softmax_ref(X[i], sc), rtol=3e-3, atol=2 * F16_TINY)
        assert res.tile_cycles[0, t] == t_.softmax_cycles(r, c) - (mul if sc == 1.0 else 0)


def test_layernorm_halves_with_extreme_rows():
    """policy.ln_halves' kernels on one tile: F_LN_STATS of each half of the rows into the two
    slots of the statistics, then F_LN_HALF of each half: the whole rows' layer norm (float64
    reference), a constant row's output beta; cycles the two flags' estimates."""
    rng = np.random.default_rng(5)
    rows, cols, eps = 6, 96, 1e-5
    h = cols // 2
    X = [_f16(rng, (rows, cols), 2.0) + np.float16(i) for i in range(len(TILES))]
    X[0][0] = 3.0
    X[0][1] = _f16(rng, cols, 20000.0)
    X[0][2] = _f16(rng, cols, 1e-3)
    X[0][3, ::2], X[0][3, 1::2] = 65504, -65504
    X[0][4, :h] += np.float16(100)                   # halves with different means
    G = [_f16(rng, cols) for _ in TILES]
    B = [_f16(rng, cols) for _ in TILES]
    XB, GB, ST = 2 * rows * h, 2 * h + (-(2 * h)) % 8, 8 * rows        # a half's bytes; beta after gamma; a slot

    def build(off):
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA + off(t), [np.concatenate([x[:, :h], x[:, h:]]) for x in X]),
             "gb": _load(a, "gb", lambda t: R0_DATA2 + off(t),
                         [np.concatenate([g[:h], b[:h], g[h:], b[h:]]) for g, b in zip(G, B)])}
        for t in TILES:
            for j in (0, 1):
                a.on(t, isa.LAYERNORM, R1 + 4096 + j * ST + off(t), R0_DATA + j * XB + off(t), 0, 0, rows, h, 0,
                     flags=isa.F_LN_STATS)
        a.sync()
        for t in TILES:
            for j in (0, 1):
                a.on(t, isa.LAYERNORM, R1 + j * XB + off(t), R0_DATA + j * XB + off(t), R0_DATA2 + 2 * j * GB + off(t),
                     R1 + 4096 + off(t), rows, h, isa.f32_bits(eps), flags=isa.F_LN_HALF)
        a.sync()
        _unload(a, "y", lambda t: R1 + off(t), 2 * XB)
        return a.build(), s

    res = _run_both(build)
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), 2, rows, h)
    t_ = Asm().t
    for i, t in enumerate(TILES):
        _close(np.concatenate([Y[i, 0], Y[i, 1]], -1), _ln_ref(X[i], G[i], B[i], eps), rtol=4e-3, atol=4e-3)
        assert res.tile_cycles[:, t].sum() == 2 * (t_.layernorm_cycles(rows, h, isa.F_LN_STATS)
                                                 + t_.layernorm_cycles(rows, h, isa.F_LN_HALF))
    assert np.array_equal(np.concatenate([Y[0, 0, 0], Y[0, 1, 0]]), B[0])


def test_deferred_softmax_rows_and_sums():
    """SOFTMAX F_SM_DEFER (policy.deferred_norm): out = exp(s - rowmax) unnormalised, in
    (0, 1], the max's entry exactly 1; word 7's f32 sums = each row's f16 outputs summed
    (float64 here: within the f32 sum's k e); masked columns 0 and not in the sum; the
    cycles are the deferred estimate's (no 1/sum, no by-row multiply), below the plain one's."""
    rng = np.random.default_rng(29)
    r, c, scale = 8, 200, 0.125
    X = [_f16(rng, (r, c), 4.0) for _ in TILES]
    X[0][1, :] = -65504; X[0][1, 17] = 65504         # one dominant entry
    X[0][2, :] = 65504                               # all at the top of f16
    X[0][4] = _f16(rng, c, 3000.0)
    valid = [0, 200, 17, 1, 0, 150]

    def build(off):
        a = Asm()
        s = {"x": _load(a, "x", lambda t: R0_DATA + off(t), X)}
        for v, t in zip(valid, TILES):
            a.on(t, isa.SOFTMAX, R1 + off(t), R0_DATA + off(t), r, c, isa.f32_bits(scale), v, R1_B + off(t),
                 flags=isa.F_SM_DEFER)
        a.sync()
        _unload(a, "y", lambda t: R1 + off(t), 2 * r * c)
        _unload(a, "sums", lambda t: R1_B + off(t), 4 * r)
        return a.build(), s

    res = _run_both(build)
    Y = res.outputs["y"].view(np.float16).reshape(len(TILES), r, c)
    S = res.outputs["sums"].view(np.float32).reshape(len(TILES), r)
    t_ = Asm().t
    for i, (v, t) in enumerate(zip(valid, TILES)):
        v = v or c
        s = X[i][:, :v].astype(np.float64) * scale
        _close(Y[i][:, :v], np.exp(s - s.max(-1, keepdims=True)), rtol=2e-3, atol=F16_TINY)
        assert not Y[i][:, v:].view(np.uint16).any() and (Y[i].max(-1) == 1).all()
        np.testing.assert_allclose(S[i], Y[i].astype(np.float64).sum(-1), rtol=c * 2.0 ** -24)
        assert res.tile_cycles[0, t] == t_.softmax_cycles(r, c, True, True) < t_.softmax_cycles(r, c)
    assert S[0, 1] == 1 and S[0, 2] == c

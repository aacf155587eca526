"""Kernels against numpy: MATMUL (f16, fp8), ADD reduction, COPY, and batched
vs unbatched execution giving identical bytes."""
import ml_dtypes
import numpy as np

from compiler import exact, isa, sim  # exact: MATMUL sums exactly, rounds once (tests/test_exact.py)

from .asm import R0_DATA, R0_DATA2, R1, R1_B, Asm, get, put

FP8 = ml_dtypes.float8_e4m3fn


def _ref_mm(A, B, scale):
    return (exact.matmul_f32(A.astype(np.float32), B.astype(np.float32)) * np.float32(scale)).astype(np.float16)


def test_matmul_f16_two_tiles():
    rng = np.random.default_rng(1)
    a = Asm()
    A = [rng.standard_normal((16, 32)).astype(np.float16) for _ in range(2)]
    B = [rng.standard_normal((32, 24)).astype(np.float16) for _ in range(2)]
    s = {}
    for t in range(2):
        s[f"a{t}"] = put([t], R0_DATA, A[t], a, f"a{t}")
        s[f"b{t}"] = put([t], R1, B[t], a, f"b{t}")
    a.matmul([0, 1], R0_DATA, R1, R0_DATA2, 16, 32, 24, scale=0.25).sync()
    nb = 16 * 24 * 2
    a.stream_out("o", 2 * nb, [(t * nb, t, R0_DATA2, nb, 1, nb, nb) for t in range(2)])
    res = sim.run(a.build(), s)
    out = get(res, "o", np.float16, (2, 16, 24))
    for t in range(2):
        assert np.array_equal(out[t], _ref_mm(A[t], B[t], 0.25))
    assert res.step_kind == ["compute"]


def test_matmul_fp8():
    rng = np.random.default_rng(2)
    a = Asm()
    A = rng.standard_normal((8, 64)).astype(FP8)
    B = rng.standard_normal((64, 32)).astype(FP8)
    # fp8 b is stored in AMP micro-panel order (the only way the target reads it)
    Bp = isa.panel_order(B, a.t.amp_panel_elems["fp8"])
    s = {"a": put([0, 1], R0_DATA, A, a, "a"), "b": put([0, 1], R1, Bp, a, "b")}
    a.matmul([0, 1], R0_DATA, R1, R0_DATA2, 8, 64, 32, scale=1 / 64, dtype="fp8", flags=isa.F_PANEL_B).sync()
    nb = 8 * 32 * 2
    a.stream_out("o", nb, [(0, 1, R0_DATA2, nb, 1, nb, nb)])
    res = sim.run(a.build(), s)
    assert np.array_equal(get(res, "o", np.float16, (8, 32)), _ref_mm(A, B, 1 / 64))
    t = a.t
    assert res.tile_cycles[0, 1] == t.matmul_cycles(8, 64, 32, "fp8")


def test_add_reduction():
    rng = np.random.default_rng(3)
    a = Asm()
    n, k, stride = 96, 5, 256         # partials 256 B apart (192 B each + gap)
    s0 = rng.standard_normal(n).astype(np.float16)
    parts = np.zeros((k, stride // 2), np.float16)
    parts[:, :n] = rng.standard_normal((k, n))
    s = {"s0": put([3], R0_DATA, s0, a, "s0"), "p": put([3], R0_DATA2, parts, a, "p")}
    # in place: out == src0
    a.on(3, isa.ADD, R0_DATA, R0_DATA, R0_DATA2, k, n, stride, dtype="f16").sync()
    a.stream_out("o", 2 * n, [(0, 3, R0_DATA, 2 * n, 1, 2 * n, 2 * n)])
    res = sim.run(a.build(), s)
    acc = s0.astype(np.float32)
    for i in range(k):
        acc = acc + parts[i, :n].astype(np.float32)
    assert np.array_equal(get(res, "o", np.float16, n), acc.astype(np.float16))
    assert res.tile_cycles[0, 3] == a.t.add_cycles(n, k)


def test_copy_strided_rows():
    a = Asm()
    src = np.arange(8 * 64, dtype=np.uint8).reshape(8, 64)
    s = {"x": put([0], R0_DATA, src, a, "x")}
    # take a 8x16-byte column block (src stride 64) and pack it (dst stride 16)
    a.on(0, isa.COPY, R1, R0_DATA + 32, 16, 8, 16, 64).sync()
    a.stream_out("o", 128, [(0, 0, R1, 128, 1, 128, 128)])
    res = sim.run(a.build(), s)
    assert np.array_equal(res.outputs["o"].reshape(8, 16), src[:, 32:48])
    assert res.tile_cycles[0, 0] == a.t.copy_cycles(128)


def test_copy_onto_its_own_source_reads_before_it_writes():
    """A COPY whose destination overlaps its source (rows moved down by 16 B and up by 16 B,
    on tiles of both halves of the machine): every source byte is read before any is
    written, as memmove would; the other tiles' bytes stay as they were."""
    a = Asm()
    T = a.T
    src = np.arange(8 * 64, dtype=np.uint8).reshape(8, 64)
    s = {"x": put(range(T), R0_DATA + 64, src, a, "x")}
    down, up = [0, T - 1], [1, T // 2]
    a.on(down, isa.COPY, R0_DATA + 80, R0_DATA + 64, 64, 8, 64, 64)
    a.on(up, isa.COPY, R0_DATA + 48, R0_DATA + 64, 64, 8, 64, 64)
    a.sync()
    a.stream_out("o", T * 640, [(t * 640, t, R0_DATA, 640, 1, 640, 640) for t in range(T)])
    res = sim.run(a.build(), s)
    got = res.outputs["o"].reshape(T, 640)
    for t in range(T):
        want = np.zeros(640, np.uint8)
        want[64:576] = src.reshape(-1)
        if t in down or t in up:
            want[(80 if t in down else 48):][:512] = src.reshape(-1)
        assert np.array_equal(got[t], want), t


def _batched_program(same_addresses: bool, with_fp8: bool):
    """Every tile multiplies its own matrices; tiles either share addresses (one
    gather by tile) or use tile-dependent addresses (a gathered index)."""
    rng = np.random.default_rng(7)
    a = Asm()
    T = a.T
    m, k, n = 8, 16, 16
    A = rng.standard_normal((T, m, k)).astype(np.float16)
    B = rng.standard_normal((T, k, n)).astype(np.float16)
    s = {"a": A.view(np.uint8).reshape(-1), "b": B.view(np.uint8).reshape(-1)}
    off = (lambda t: 0) if same_addresses else (lambda t: 256 * (t % 7))
    na, nb, no = m * k * 2, k * n * 2, m * n * 2
    a.stream_in("a", [(t * na, t, R0_DATA + off(t), na, 1, na, na) for t in range(T)])
    a.stream_in("b", [(t * nb, t, R1 + off(t), nb, 1, nb, nb) for t in range(T)])
    for t in range(T):
        a.matmul(t, R0_DATA + off(t), R1 + off(t), R0_DATA2 + off(t), m, k, n, scale=0.5)
        # a second, shape-different kernel on odd tiles only: groups of different sizes
        if t % 2:
            a.on(t, isa.ADD, R1_B + off(t), R0_DATA2 + off(t), R0_DATA2 + off(t), 1, m * n, 0)
    a.sync()
    a.stream_out("o", T * no, [(t * no, t, R0_DATA2 + off(t), no, 1, no, no) for t in range(T)])
    a.stream_out("d", T * no, [(t * no, t, R1_B + off(t), no, 1, no, no) for t in range(T)])
    return a.build(), s, (A, B)


def test_batched_equals_unbatched():
    p_same, s, (A, B) = _batched_program(True, False)
    p_diff, s2, _ = _batched_program(False, False)
    r1, r2 = sim.run(p_same, s), sim.run(p_diff, s2)
    for name in ("o", "d"):
        assert np.array_equal(r1.outputs[name], r2.outputs[name])
    assert np.array_equal(r1.tile_cycles, r2.tile_cycles)
    out = r1.outputs["o"].view(np.float16).reshape(A.shape[0], 8, 16)
    # each tile's result equals a one-matrix (unbatched) numpy computation
    for t in (0, 1, 33, 63):
        assert np.array_equal(out[t], _ref_mm(A[t], B[t], 0.5))
    dbl = r1.outputs["d"].view(np.float16).reshape(A.shape[0], 8, 16)
    assert np.array_equal(dbl[1::2], (out[1::2].astype(np.float32) * 2).astype(np.float16))
    assert not dbl[0::2].any()


def test_overlapping_buffers_give_a_wrong_answer():
    """The simulator holds tensors only at their addresses: an allocator bug that
    overlaps two live buffers is not refused, it corrupts the result."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((8, 8)).astype(np.float16)
    B = rng.standard_normal((8, 8)).astype(np.float16)
    outs = {}
    for second_out in (R0_DATA2 + 128, R0_DATA2 + 64):      # disjoint vs overlapping outputs
        a = Asm()
        s = {"a": put([0], R0_DATA, A, a, "a"), "b": put([0], R1, B, a, "b")}
        a.matmul(0, R0_DATA, R1, R0_DATA2, 8, 8, 8)
        a.matmul(0, R0_DATA, R1, second_out, 8, 8, 8, scale=2.0).sync()
        a.stream_out("o", 128, [(0, 0, R0_DATA2, 128, 1, 128, 128)])
        outs[second_out] = get(sim.run(a.build(), s), "o", np.float16, (8, 8))
    assert np.array_equal(outs[R0_DATA2 + 128], _ref_mm(A, B, 1.0))
    assert not np.array_equal(outs[R0_DATA2 + 64], _ref_mm(A, B, 1.0))


def test_f16_rounding_matches_numpy_bit_for_bit():
    from compiler.sim.operands import to_f16
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.standard_normal(200_000) * 10.0 ** rng.integers(-12, 6, 200_000),
                        np.arange(-3000, 3000) * 2.0 ** -25,          # exact ties between subnormals
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -14, -(2.0 ** -14), 65520.0, 1e-45]])
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
        assert np.array_equal(to_f16(x).view(np.uint16), x.astype(np.float16).view(np.uint16))
        y = np.where(np.abs(x) < 2.0 ** -14, np.float32(1), x)[:100_000]    # few subnormals: astype path
        y[::1000] = np.float32(3e-7)
        assert np.array_equal(to_f16(y).view(np.uint16), y.astype(np.float16).view(np.uint16))


def test_widening_tables_match_casts():
    from compiler.sim.operands import widen
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    assert np.array_equal(widen(h.view(np.uint8), "f16").view(np.uint32),
                          h.view(np.float16).astype(np.float32).view(np.uint32))
    b = np.arange(256, dtype=np.uint8)
    assert np.array_equal(widen(b, "fp8").view(np.uint32), b.view(FP8).astype(np.float32).view(np.uint32))


def test_fp8_widening_any_length():
    from compiler.sim.operands import widen
    b = np.random.default_rng(3).integers(0, 256, (5, 11), dtype=np.uint8)
    for x in (b, b[:, :10], b[:, 1:]):          # odd length, even length, a strided view
        assert np.array_equal(widen(x, "fp8").view(np.uint32), x.view(FP8).astype(np.float32).view(np.uint32))

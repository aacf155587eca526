"""AMP micro-panel b (isa.F_PANEL_B): the panel order itself against a naive
reference, MATMUL reading panel-ordered fp8 b (full and partial last panels),
a row-major b wrongly flagged as panels giving a wrong answer, the machine's
refusals, and the host sending a Program.in_panels stream rearranged."""
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from compiler import exact, isa, sim  # exact: MATMUL sums exactly, rounds once (tests/test_exact.py)
from compiler.sim import MachineFault

from .asm import R0_DATA, R0_DATA2, R1, TINY, Asm, get, put

FP8 = ml_dtypes.float8_e4m3fn
P8 = TINY.amp_panel_elems["fp8"]


# ---- the order: a naive element-by-element reference (shares no code with isa) ----------
def _naive_panel(x, P):
    """Row blocks of height P (the last one shorter), each written column by column."""
    R, C = x.shape
    out = []
    for p0 in range(0, R, P):
        for c in range(C):
            for r in range(p0, min(R, p0 + P)):
                out.append(x[r, c])
    return np.array(out, x.dtype)


def _naive_unpanel(flat, R, C, P):
    x = np.zeros((R, C), flat.dtype)
    i = 0
    for p0 in range(0, R, P):
        for c in range(C):
            for r in range(p0, min(R, p0 + P)):
                x[r, c] = flat[i]
                i += 1
    return x


@pytest.mark.parametrize("R", [1, 5, 31, 32, 33, 48, 64, 80])
@pytest.mark.parametrize("C", [1, 3, 24])
@pytest.mark.parametrize("P", [4, 32])
def test_panel_order_against_naive(R, C, P):
    x = np.arange(R * C, dtype=np.int32).reshape(R, C) * 7 + 1
    flat = isa.panel_order(x, P)
    assert flat.shape == (R * C,)
    assert np.array_equal(flat, _naive_panel(x, P))
    assert np.array_equal(isa.from_panel_order(flat, R, C, P), x)
    assert np.array_equal(_naive_unpanel(flat, R, C, P), x)
    # leading batch axes: each matrix on its own
    xs = np.stack([x, -x, x + 100])
    fs = isa.panel_order(xs, P)
    assert np.array_equal(fs, np.stack([_naive_panel(m, P) for m in xs]))
    assert np.array_equal(isa.from_panel_order(fs, R, C, P), xs)


# ---- MATMUL reading panel-ordered b ---------------------------------------------------
M, N = 8, 24
KS = [32, 64, 48, 80]          # whole panels, and a partial last panel (48 = 32 + 16, 80 = 64 + 16)


def _ref(A, B, scale):
    return (exact.matmul_f32(A.astype(np.float32), B.astype(np.float32)) * np.float32(scale)).astype(np.float16)


def _mm_run(A, B_stored, k, flags, dta, scale=0.125, tile=0, target=TINY):
    """One MATMUL (b fp8 from the bytes B_stored) on `tile`; returns (result, run)."""
    a = Asm(target)
    s = {"a": put([tile], R0_DATA, A, a, "a"), "b": put([tile], R1, B_stored, a, "b")}
    a.matmul(tile, R0_DATA, R1, R0_DATA2, M, k, N, scale=scale, dtype="fp8", dtype2=dta, flags=flags).sync()
    nb = M * N * 2
    a.stream_out("o", nb, [(0, tile, R0_DATA2, nb, 1, nb, nb)])
    res = sim.run(a.build(), s)
    return get(res, "o", np.float16, (M, N)), res


@pytest.mark.parametrize("dta", ["f16", "fp8"])
def test_matmul_panel_b_all_k_in_one_round(dta):
    """Four tiles, four k (four shape groups in one round), two tiles per k sharing a
    group: every result equals numpy on the row-major B."""
    rng = np.random.default_rng(21)
    adt = np.float16 if dta == "f16" else FP8
    tiles = list(range(8))
    ks = [KS[i % len(KS)] for i in tiles]
    A = [rng.standard_normal((M, k)).astype(adt) for k in ks]
    B = [rng.standard_normal((k, N)).astype(FP8) for k in ks]
    a = Asm()
    s = {}
    for t, k in zip(tiles, ks):
        s[f"a{t}"] = put([t], R0_DATA, A[t], a, f"a{t}")
        s[f"b{t}"] = put([t], R1, isa.panel_order(B[t], P8), a, f"b{t}")
        a.matmul(t, R0_DATA, R1, R0_DATA2, M, k, N, scale=0.125, dtype="fp8", dtype2=dta, flags=isa.F_PANEL_B)
    a.sync()
    nb = M * N * 2
    a.stream_out("o", nb * len(tiles), [(i * nb, t, R0_DATA2, nb, 1, nb, nb) for i, t in enumerate(tiles)])
    res = sim.run(a.build(), s)
    out = get(res, "o", np.float16, (len(tiles), M, N))
    for t, k in zip(tiles, ks):
        assert np.array_equal(out[t], _ref(A[t], B[t], 0.125)), (t, k)
        # the panel layout does not change the cost
        assert res.tile_cycles[0, t] == TINY.matmul_cycles(M, k, N, "fp8", dta)


@pytest.mark.parametrize("k", KS)
def test_row_major_bytes_flagged_as_panels_are_wrong(k):
    """The injected fault: the same fp8 b bytes written row-major but flagged
    F_PANEL_B. If the kernel ignored the flag (read row-major) this would pass."""
    rng = np.random.default_rng(k)
    A = rng.standard_normal((M, k)).astype(np.float16)
    B = rng.standard_normal((k, N)).astype(FP8)
    ref = _ref(A, B, 0.125).astype(np.float64)
    good, _ = _mm_run(A, isa.panel_order(B, P8), k, isa.F_PANEL_B, "f16")
    bad, _ = _mm_run(A, B, k, isa.F_PANEL_B, "f16")
    assert np.array_equal(good, ref.astype(np.float16))
    rel = np.linalg.norm(bad.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert rel > 0.5, rel


# ---- refusals ---------------------------------------------------------------------------------
def _fault(flags, dtype="fp8", target=TINY, match=None):
    a = Asm(target)
    a.sync()
    a.on(6, isa.COPY, R1 + 8192, R1 + 8192 + 64, 4, 1, 4, 4)      # the MATMUL is at pc 2 of superstep 1
    a.matmul(6, R0_DATA, R1, R0_DATA2, M, 32, N, dtype=dtype, flags=flags).sync()
    with pytest.raises(MachineFault, match=match) as e:
        sim.run(a.build(), {})
    f = e.value
    assert (f.tile, f.step, f.pc) == (6, 1, 2)
    assert str(f).startswith("tile 6, superstep 1, pc 2: MATMUL b")
    return f


def test_fp8_b_without_panel_flag_refused():
    _fault(0, match="MATMUL b of fp8 is read only as micro-panels of 32 on this target: F_PANEL_B is required")


def test_panel_flag_on_a_dtype_without_panels_refused():
    _fault(isa.F_PANEL_B, "f16", match="MATMUL b of f16 has no micro-panel mode on this target")
    _fault(isa.F_PANEL_B, "f32", match="MATMUL b of f32 has no micro-panel mode")


def test_panel_and_transpose_together_refused():
    _fault(isa.F_PANEL_B | isa.F_TRANSPOSE_B, match="both micro-panel .F_PANEL_B. and transposed")
    _fault(isa.F_TRANSPOSE_B, match="F_PANEL_B is required")       # fp8 transposed alone: not panels either


def test_the_rule_follows_the_target():
    """A target listing no panel dtype reads fp8 b row-major and refuses F_PANEL_B."""
    plain = replace(TINY, amp_panel_elems={})
    rng = np.random.default_rng(4)
    A = rng.standard_normal((M, 48)).astype(np.float16)
    B = rng.standard_normal((48, N)).astype(FP8)
    got, _ = _mm_run(A, B, 48, 0, "f16", target=plain)
    assert np.array_equal(got, _ref(A, B, 0.125))
    _fault(isa.F_PANEL_B, target=plain, match="MATMUL b of fp8 has no micro-panel mode")
    # and another panel height is honoured: P = 16 splits k = 48 into three panels
    p16 = replace(TINY, amp_panel_elems={"fp8": 16})
    got, _ = _mm_run(A, isa.panel_order(B, 16), 48, isa.F_PANEL_B, "f16", target=p16)
    assert np.array_equal(got, _ref(A, B, 0.125))


# ---- the host sends in_panels streams rearranged ----------------------------------------------
def test_host_sends_panel_streams_rearranged():
    """Stream "w" = two row-major fp8 [48, 24] matrices; the host sends them in panel
    order, so a descriptor at host offset 48*24 delivers matrix 1 as panels: the bytes
    at the tile are panel_order(W[1]) and an F_PANEL_B MATMUL reads W[1] correctly."""
    rng = np.random.default_rng(8)
    k = 48
    W = rng.standard_normal((2, k, N)).astype(FP8)
    A = rng.standard_normal((M, k)).astype(np.float16)
    a = Asm()
    a.in_panels["w"] = (k, N, 1, P8)
    nw = k * N
    a.stream_in("w", [(nw, 3, R1, nw, 1, nw, nw)])
    s = {"w": W.view(np.uint8).reshape(-1), "a": put([3], R0_DATA, A, a, "a")}
    raw = s["w"].copy()
    a.matmul(3, R0_DATA, R1, R0_DATA2, M, k, N, dtype="fp8", dtype2="f16", flags=isa.F_PANEL_B).sync()
    no = M * N * 2
    a.stream_out("o", no, [(0, 3, R0_DATA2, no, 1, no, no)])
    a.stream_out("b", nw, [(0, 3, R1, nw, 1, nw, nw)])
    res = sim.run(a.build(), s)
    assert np.array_equal(res.outputs["b"], _naive_panel(W[1], P8).view(np.uint8))
    assert np.array_equal(get(res, "o", np.float16, (M, N)), _ref(A, W[1], 1.0))
    assert np.array_equal(s["w"], raw)                 # the caller's buffer is not rearranged in place


def test_host_panels_move_whole_elements():
    """ebytes = 2: each 2-byte element moves as one (a byte-wise order would split them)."""
    R, C, P = 5, 3, 2
    X = np.arange(2 * R * C, dtype=np.uint16).reshape(2, R, C) * 257 + 3   # distinct low and high bytes
    a = Asm()
    a.in_panels["x"] = (R, C, 2, P)
    nb = X.nbytes
    a.stream_in("x", [(0, 0, R1, nb, 1, nb, nb)])
    a.stream_out("o", nb, [(0, 0, R1, nb, 1, nb, nb)])
    res = sim.run(a.build(), {"x": X.view(np.uint8).reshape(-1)})
    want = np.concatenate([_naive_panel(m, P) for m in X])
    assert np.array_equal(res.outputs["o"].view(np.uint16), want)


def test_host_panel_stream_errors():
    a = Asm()
    a.in_panels["w"] = (48, N, 1, P8)
    a.stream_in("w", [(0, 0, R1, 64, 1, 64, 64)])
    p = a.build()
    with pytest.raises(ValueError, match="'w'.*not whole \\[48, 24\\] matrices"):
        sim.run(p, {"w": np.zeros(48 * N + 8, np.uint8)})
    sim.run(p, {"w": np.zeros(2 * 48 * N, np.uint8)})      # whole matrices: fine
    a.in_panels["ghost"] = (4, 4, 1, P8)
    with pytest.raises(ValueError, match="'ghost'"):
        sim.run(a.build(), {"w": np.zeros(48 * N, np.uint8)})

"""The compiled inner loops (compiler/sim/jit.py) against the numpy code they replace,
written independently here: f16 rounding against numpy's astype (every boundary of
its cases; experiments/host_time/f16_exhaustive.py checks all 2**32 inputs), panel
loads against isa.from_panel_order, chunk moves against a byte-by-byte Python loop."""
import ml_dtypes
import numpy as np

from compiler import isa
from compiler.sim import jit, memory
from compiler.sim.kernels import _NO_SCALE, _WIDEN

FP8 = ml_dtypes.float8_e4m3fn


def _bits(*ranges):
    return np.concatenate([np.arange(a, b, s, dtype=np.uint64).astype(np.uint32) for a, b, s in ranges])


def test_f16_rounding_is_numpys():
    rng = np.random.default_rng(0)
    b = np.concatenate([
        rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32),
        _bits((0, 2000, 1), (0x32FFF000, 0x33001000, 1),      # around half the smallest subnormal
              (0x387FE000, 0x38801000, 1),                    # subnormal / normal boundary
              (0x33000000, 0x38800000, 4099),                 # every subnormal exponent
              (0x477FE000, 0x47801000, 1),                    # largest finite / overflow to inf
              (0x7F7FF000, 0x7F800000 + 0x3000, 1),           # inf and NaN payloads
              (0x7FFFE000, 0x80000000, 1))])
    b = np.concatenate([b, b | np.uint32(0x80000000)])
    x = b.view(np.float32)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    got = np.empty(len(x), np.uint16)
    jit.f16_bits(x, got)
    bad = np.flatnonzero(got != want)
    assert len(bad) == 0, [(hex(b[i]), hex(want[i]), hex(got[i])) for i in bad[:5]]


def test_store_f16_scales_then_rounds():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 50)) * 1e-3).astype(np.float32)
    scale = np.array([1.0, 0.125, 3.3], np.float32)
    mem = np.zeros(1000, np.uint16)
    pos = np.array([0, 100, 400])
    jit.store_f16(mem, pos, x, scale)
    want = (x * scale[:, None]).astype(np.float16).view(np.uint16)
    assert all(np.array_equal(mem[p:p + 50], w) for p, w in zip(pos, want))
    jit.store_f16(mem, pos, x, _NO_SCALE)
    assert all(np.array_equal(mem[p:p + 50], w) for p, w in zip(pos, x.astype(np.float16).view(np.uint16)))


def test_f16_widening_is_numpys():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty(len(h), np.float32)
    jit.widen16(h, got)
    assert np.array_equal(got.view(np.uint32), h.view(np.float16).astype(np.float32).view(np.uint32))


def test_loads_widen_like_the_library_casts():
    rng = np.random.default_rng(2)
    flat = rng.integers(0, 256, 4096, dtype=np.uint8)
    pos = np.array([0, 1000, 2002, 3000])
    out = np.empty((4, 37), np.float32)
    jit.load_fp8(flat, pos, 37, _WIDEN["fp8"], out)
    want = np.stack([flat[p:p + 37].view(FP8).astype(np.float32) for p in pos])
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))       # NaNs included
    jit.load_f16(flat.view(np.uint16), pos // 2, 37, out)
    want = np.stack([flat[p:p + 74].view(np.float16).astype(np.float32) for p in pos])
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))


def test_panel_loads_undo_panel_order():
    rng = np.random.default_rng(3)
    for es, dt, table in ((1, FP8, _WIDEN["fp8"]), (2, np.float16, _WIDEN["f16"])):
        for R, C, P in ((64, 24, 16), (70, 9, 16), (5, 3, 8), (33, 40, 32)):
            mats = rng.integers(0, 256, (3, R, C * es), dtype=np.uint8)
            el = mats.view(np.dtype((np.void, es))).reshape(3, R, C)
            stored = np.ascontiguousarray(isa.panel_order(el, P)).view(np.uint8).reshape(3, -1)
            flat = np.zeros(8 * R * C * es, np.uint8)
            pos = np.array([0, 2 * R * C * es, 5 * R * C * es])
            for i, p in enumerate(pos):
                flat[p:p + R * C * es] = stored[i]
            out = np.empty((3, R, C), np.float32)
            jit.load_panels(flat, pos, R, C, P, es, table, out)
            want = mats.view(dt).astype(np.float32).reshape(3, R, C)
            assert np.array_equal(out.view(np.uint32), want.view(np.uint32)), (es, R, C, P)


def _move_reference(buf, sp, dp, length):
    """Every chunk read first, then written in by_length order (length, then index)."""
    data = [bytes(buf[s:s + n]) for s, n in zip(sp, length)]
    for i in sorted(range(len(sp)), key=lambda i: (length[i], i)):
        buf[dp[i]:dp[i] + length[i]] = np.frombuffer(data[i], np.uint8)


def test_move_reads_all_before_writing_and_later_chunks_win():
    rng = np.random.default_rng(4)
    for trial in range(20):
        buf = rng.integers(0, 256, 600, dtype=np.uint8)
        n = int(rng.integers(1, 30))
        length = rng.choice([4, 8, 12], n)
        sp = rng.integers(0, 580, n) // 4 * 4
        dp = rng.integers(0, 580, n) // 4 * 4               # overlapping sources and destinations
        want = buf.copy()
        _move_reference(want, sp, dp, length)
        memory.move(buf, buf, sp, dp, length)
        assert np.array_equal(buf, want), trial


def test_move_without_staging_where_pages_are_disjoint():
    """Sources on even 4 KiB pages, destinations (overlapping each other) on odd ones:
    moved chunk by chunk (jit.disjoint holds) with the staged move's result; one chunk
    reading a destination page sends it back through the staging buffer."""
    rng = np.random.default_rng(5)
    n = 40
    length = rng.choice([8, 16, 24], n)
    sp = rng.integers(0, 8, n) * 8192 + rng.integers(0, 500, n) * 4
    dp = rng.integers(0, 8, n) * 8192 + 4096 + rng.integers(0, 20, n) * 4
    assert jit.disjoint(sp, dp, length, 1 << 16)
    for src in (sp, np.r_[sp[:-1], dp[0]]):
        assert jit.disjoint(src, dp, length, 1 << 16) == (src is sp)
        buf = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
        want = buf.copy()
        _move_reference(want, src, dp, length)
        memory.move(buf, buf, src, dp, length)
        assert np.array_equal(buf, want)
    other = rng.integers(0, 256, 1 << 16, dtype=np.uint8)       # distinct buffers: never staged
    buf = np.zeros(1 << 16, np.uint8)
    want = buf.copy()
    for i in sorted(range(n), key=lambda i: (length[i], i)):
        want[dp[i]:dp[i] + length[i]] = other[sp[i]:sp[i] + length[i]]
    memory.move(other, buf, sp, dp, length)
    assert np.array_equal(buf, want)


def test_add_sums_in_the_kernels_order():
    rng = np.random.default_rng(6)
    h = rng.standard_normal(4000).astype(np.float16)
    h[::97] = np.float16(6e-8)                               # subnormals
    flat16 = h.view(np.uint16)
    p0, p1, st = np.array([0, 1000]), np.array([2000, 2500]), np.array([300, 100])
    out = np.empty((2, 90), np.float32)
    jit.add_f16(flat16, p0, p1, st, 4, 90, out)
    for i in range(2):
        want = h[p0[i]:p0[i] + 90].astype(np.float32)
        for q in range(4):
            want = want + h[p1[i] + q * st[i]:p1[i] + q * st[i] + 90].astype(np.float32)
        assert np.array_equal(out[i].view(np.uint32), want.view(np.uint32))


def test_move_on_two_threads_gives_the_same_bytes():
    """A move split at a position no chunk straddles (staged and direct) equals the
    one-thread move byte for byte, overlapping destinations included; a split that a
    chunk straddles falls back to one thread."""
    rng = np.random.default_rng(8)
    n, size = 4000, 1 << 18
    length = rng.choice([256, 512, 1024], n)
    for direct in (False, True):       # direct: sources in the upper half, destinations below
        sp = rng.integers(0, size // 2 - 1024, n) + (size // 2 if direct else 0)
        dp = rng.integers(0, size // 2 - 1024, n)                          # overlapping each other
        split = size // 4
        dp = np.where((dp < split) & (dp + length > split), split, dp)     # none straddles it
        assert jit.split_ok(dp, length, split) and jit.disjoint(sp, dp, length, size) == direct
        buf = rng.integers(0, 256, size, dtype=np.uint8)
        one = buf.copy()
        memory.move(one, one, sp, dp, length)
        two = buf.copy()
        memory.move(two, two, sp, dp, length, split=split)
        assert np.array_equal(one, two), direct
    assert not jit.split_ok(np.array([100]), np.array([8]), 104)

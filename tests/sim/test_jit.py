"""The compiled inner loops (compiler/sim/jit.py) against the numpy code they replace,
written independently here: f16 rounding against numpy's astype (every boundary of
its cases; experiments/host_time/f16_exhaustive.py checks all 2**32 inputs), panel
loads against isa.from_panel_order, chunk moves against a byte-by-byte Python loop."""
import ml_dtypes
import numpy as np
import pytest

from compiler import isa
from compiler.sim import jit, memory
from compiler.sim.operands import _NO_SCALE, _WIDEN

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


def _move_reference(buf, sp, dp, length, src=None):
    """Every chunk read first, then written in by_length order (length, then index)."""
    src = buf if src is None else src
    data = [bytes(src[s:s + n]) for s, n in zip(sp, length)]
    for i in sorted(range(len(sp)), key=lambda i: (length[i], i)):
        buf[dp[i]:dp[i] + length[i]] = np.frombuffer(data[i], np.uint8)


@pytest.mark.parametrize("two_threads", [False, True])
def test_move_within_reads_all_before_writing_and_later_chunks_win(monkeypatch, two_threads):
    """COPY's move (memory.move_within) on random chunks, each inside one tile, sources and
    destinations overlapping each other: equal to reading every chunk, then writing them in
    by_length order, on one thread or two."""
    if two_threads:
        monkeypatch.setattr(memory, "PARALLEL_BYTES", 0)
    rng = np.random.default_rng(4)
    T, TB = 4, 2048
    for trial in range(40):
        n = int(rng.integers(1, 60))
        length = rng.choice([4, 8, 12, 600], n)
        tile = rng.integers(0, T, n) * TB
        sp = tile + rng.integers(0, TB - 600, n) // 4 * 4
        dp = tile + rng.integers(0, TB - 600, n) // 4 * 4
        buf = rng.integers(0, 256, T * TB, dtype=np.uint8)
        want = buf.copy()
        _move_reference(want, sp, dp, length)
        staged = memory.move_within(buf, T, TB, sp, dp, length)
        assert np.array_equal(buf, want), trial
        assert 0 <= staged <= int(length.sum())
    memory.drop_stage()


def test_move_within_stages_only_chunks_a_write_may_touch():
    """Sources on even 4 KiB pages, destinations (overlapping each other) on odd ones: no
    chunk staged; one chunk reading a destination page is staged (and only its bytes)."""
    rng = np.random.default_rng(5)
    n, T, TB = 40, 2, 1 << 15
    length = rng.choice([8, 16, 24], n)
    tile = rng.integers(0, T, n) * TB
    sp = tile + rng.integers(0, 4, n) * 8192 + rng.integers(0, 500, n) * 4
    dp = tile + rng.integers(0, 4, n) * 8192 + 4096 + rng.integers(0, 20, n) * 4
    for src, staged_want in ((sp, 0), (np.r_[sp[:-1], dp[0]], length[-1])):
        buf = rng.integers(0, 256, T * TB, dtype=np.uint8)
        want = buf.copy()
        _move_reference(want, src, dp, length)
        assert memory.move_within(buf, T, TB, src, dp, length) == staged_want
        assert np.array_equal(buf, want)
    memory.drop_stage()


def test_move_between_buffers_and_on_two_threads(monkeypatch):
    """Between two buffers (program load, host streams) every chunk moves straight, later
    chunks winning where destinations overlap; split at a position no chunk straddles, on
    two threads, the same bytes; buffers that share memory are refused."""
    rng = np.random.default_rng(8)
    n, size = 4000, 1 << 18
    length = rng.choice([256, 512, 1024], n)
    sp = rng.integers(0, size - 1024, n)
    dp = rng.integers(0, size - 1024, n)                               # overlapping each other
    split = size // 2
    dp = np.where((dp < split) & (dp + length > split), split, dp)     # none straddles it
    assert jit.split_ok(dp, length, split)
    assert not jit.split_ok(np.array([100]), np.array([8]), 104)
    src = rng.integers(0, 256, size, dtype=np.uint8)
    want = np.zeros(size, np.uint8)
    _move_reference(want, sp, dp, length, src)
    one, two = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
    memory.move(src, one, sp, dp, length)
    monkeypatch.setattr(memory, "PARALLEL_BYTES", 0)
    memory.move(src, two, sp, dp, length, split=split)
    assert np.array_equal(one, want) and np.array_equal(two, want)
    with pytest.raises(ValueError, match="share memory"):
        memory.move(src, src[8:], sp[:1], dp[:1], length[:1])


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



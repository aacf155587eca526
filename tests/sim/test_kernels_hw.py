"""The CPU-conversion loops (compiler/sim/jit.py *_hw) against numpy's casts and against
the integer-arithmetic loops they stand in for, on data full of the hard cases (NaN
payloads signalling and quiet, inf, subnormals, values that round to inf or to zero)
and odd lengths; and whole programs giving the same bytes with them on or off and with
any slicing of a group over the worker threads."""
import numpy as np
import pytest

from compiler import sim
from compiler.sim import jit, kernels
from compiler.sim.operands import _NO_SCALE

pytestmark = pytest.mark.skipif(not jit.hw_f16_ok(), reason="no CPU f16 conversion here")


def _hard_f16(rng, n):
    """f16 bit patterns: every class, signalling NaNs (0x7C01-0x7DFF) most of all."""
    h = rng.integers(0, 1 << 16, n).astype(np.uint16)
    special = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00,
                        0x7C01, 0xFC01, 0x7DFF, 0x7E00, 0xFFFF, 0x7D55], np.uint16)
    h[rng.integers(0, n, n // 4)] = special[rng.integers(0, len(special), n // 4)]
    return h


def _hard_f32(rng, n):
    """float32 values at numpy's rounding boundaries (f16 subnormal, overflow), NaNs of
    every payload (signalling ones included), inf, f32 subnormals, ordinary values."""
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    picks = np.array([0x33000000, 0x33000001, 0x387FE000, 0x387FF000, 0x38800000, 0x477FEFFF,
                      0x477FF000, 0x7F800000, 0x7F800001, 0x7F801FFF, 0x7F802000, 0x7FBFFFFF,
                      0x7FC00000, 0x7FFFFFFF, 0x00000001, 0x3F800000], np.uint32)
    k = rng.integers(0, n, n // 3)
    b[k] = picks[rng.integers(0, len(picks), len(k))] | (rng.integers(0, 2, len(k)).astype(np.uint32) << 31)
    return b.view(np.float32)


def test_widening_every_f16_is_numpys():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty((1, h.size), np.float32)
    jit.load_f16_hw(h, np.zeros(1, np.int64), h.size, got)
    assert np.array_equal(got[0].view(np.uint32), h.view(np.float16).astype(np.float32).view(np.uint32))


def test_rounding_is_numpys_nans_included():
    rng = np.random.default_rng(11)
    x = _hard_f32(rng, 300_001)
    got = np.empty(x.size, np.uint16)
    jit.store_f16_hw(got, np.zeros(1, np.int64), x[None], _NO_SCALE)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    bad = np.flatnonzero(got != want)
    assert len(bad) == 0, [(hex(x.view(np.uint32)[i]), hex(want[i]), hex(got[i])) for i in bad[:5]]


@pytest.mark.parametrize("n", [1, 15, 16, 17, 203])
def test_loops_match_the_arithmetic_ones(n):
    rng = np.random.default_rng(n)
    mem = _hard_f16(rng, 8192)
    p0 = np.array([0, 700, 3001, 5000])             # odd uint16 positions too
    p1 = np.array([1500, 2001, 6000, 77])
    st = np.array([n, n + 3, 2 * n, n])
    a, b = np.empty((4, n), np.float32), np.empty((4, n), np.float32)
    jit.load_f16(mem, p0, n, a)
    jit.load_f16_hw(mem, p0, n, b)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    f16 = lambda p: mem[p:p + n].view(np.float16).astype(np.float32)
    for k in (1, 3):
        # numpy's `acc += partial`, the order the kernel adds in. Where two NaNs meet,
        # which payload survives is the add instruction's operand order, which neither
        # IEEE nor numpy fixes (its vector and scalar loops differ): NaN there, equal bits
        # everywhere else
        acc = np.stack([f16(p) for p in p0])
        with np.errstate(all="ignore"):
            for q in range(k):
                acc += np.stack([f16(p1[i] + q * st[i]) for i in range(4)])
        jit.add_f16_hw(mem, p0, p1, st, k, n, b)
        nan = np.isnan(acc)
        assert np.array_equal(nan, np.isnan(b)) and (n < 100 or nan.any() and (~nan).any())
        assert np.array_equal(acc.view(np.uint32)[~nan], b.view(np.uint32)[~nan]), k
        jit.add_f16(mem, p0, p1, st, k, n, a)
        assert np.array_equal(a.view(np.uint32)[~nan], b.view(np.uint32)[~nan]), k
    x = _hard_f32(rng, 4 * n).reshape(4, n)
    scale = np.array([1.0, 0.37, 3e4, -2.0 ** -20], np.float32)
    for sc in (scale, _NO_SCALE):
        m1, m2 = np.zeros(8192, np.uint16), np.zeros(8192, np.uint16)
        with np.errstate(all="ignore"):
            jit.store_f16(m1, p0, x, sc)
            jit.store_f16_hw(m2, p0, x, sc)
        assert np.array_equal(m1, m2)


def test_a_planted_conversion_bug_is_caught(monkeypatch):
    """The start-up check refuses CPU loops that quiet NaNs (the CPU's own behaviour)."""
    raw = jit.load_f16_hw

    def quieting(flat16, pos16, n, out):
        raw(flat16, pos16, n, out)
        out.view(np.uint32)[np.isnan(out)] |= np.uint32(0x400000)
    monkeypatch.setattr(jit, "load_f16_hw", quieting)
    monkeypatch.setattr(jit, "_HW_OK", [])
    assert not jit.hw_f16_ok()


def test_a_planted_rounding_bug_is_caught(monkeypatch):
    """...and CPU rounding that flushes f16 subnormal results to zero."""
    raw = jit.store_f16_hw

    def flushing(flat16, pos16, x, scale):
        raw(flat16, pos16, x, scale)
        for i, p in enumerate(pos16):
            seg = flat16[p:p + x.shape[1]]
            seg[(seg & 0x7C00) == 0] &= np.uint16(0x8000)
    monkeypatch.setattr(jit, "store_f16_hw", flushing)
    monkeypatch.setattr(jit, "_HW_OK", [])
    assert not jit.hw_f16_ok()


def test_program_bytes_do_not_depend_on_conversion_threads_or_slicing(monkeypatch):
    """One program (MATMULs of every operand layout, ADD, the vector kernels, in a
    Repeat), run with the arithmetic loops on one thread, then with the CPU loops and
    every group, however small, cut into one-tile slices on 3 threads: the same outputs
    and cycles."""
    from compiler.sim import bench
    from .asm import TINY
    from .test_kernels import _batched_program
    progs = [_batched_program(False, True)[:2], bench.repeat_program(TINY, 3)]
    monkeypatch.setattr(kernels, "WORKERS", 1)
    monkeypatch.setattr(kernels, "F16_CPU", False)
    one = [sim.run(p, s) for p, s in progs]
    monkeypatch.setattr(kernels, "WORKERS", 3)
    monkeypatch.setattr(kernels, "F16_CPU", True)
    monkeypatch.setattr(kernels, "SPLIT_BYTES", 0)
    monkeypatch.setattr(kernels, "SLICE_BYTES", 1)
    for (p, s), r1 in zip(progs, one):
        r3 = sim.run(p, s)
        assert r1.outputs.keys() == r3.outputs.keys()
        for name in r1.outputs:
            assert np.array_equal(r1.outputs[name], r3.outputs[name]), name
        assert np.array_equal(r1.tile_cycles, r3.tile_cycles)

"""The reference's own f16 rounding (one compiled pass over float32, in place) gives
numpy's cast to float16 and back on every binade's ties and near-ties, the specials and
a random sample (all 2**32 values: experiments/host_time/f16_exhaustive.py)."""
import numpy as np

from compiler import reference


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

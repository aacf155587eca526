"""The model stage's host-side speed work: the vectorised FP8 cast is ml_dtypes' cast bit
for bit, seeded weights are a function of (seed, name) alone, and the reference's two
threaded evaluations give what one evaluation at a time gives."""
import ml_dtypes
import numpy as np
import pytest

from compiler import reference
from compiler.models import vit, vit_weights
from compiler.models.fp8cast import to_fp8
from compiler.models.gemm import quantize
from compiler.models.weights import name_rng, uniform

FP8 = ml_dtypes.float8_e4m3fn


@pytest.mark.parametrize("low", [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF])
def test_fp8_cast_is_ml_dtypes_cast_on_every_rounding_class(low):
    """Every float32 top half (sign, exponent, 7 mantissa bits) with low halves below, at
    and above the tie: RNE, subnormals, zeros, NaN; saturation where ml_dtypes overflows."""
    x = ((np.arange(1 << 16, dtype=np.uint32) << 16) | low).view(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(FP8).view(np.uint8)
    got = to_fp8(x).view(np.uint8)
    fin = np.abs(x) <= 448
    assert np.array_equal(got[fin], want[fin])
    assert np.all(got[np.isnan(x)] & 0x7F == 0x7F)
    big = np.isfinite(x) & (np.abs(x) > 464)               # ml_dtypes: NaN; this cast saturates
    assert np.all(got[big] & 0x7F == 0x7E)


def test_quantize_float32_is_the_plain_cast():
    x = np.random.default_rng(0).standard_normal((300, 70)).astype(np.float32) * 3
    stored, scale = quantize(x, "fp8")
    assert scale == float(np.abs(x).max()) / 448
    assert np.array_equal(stored.view(np.uint8), (x / scale).astype(FP8).view(np.uint8))


def test_seeded_weights_depend_on_seed_and_name_only():
    w = vit_weights.seeded_weights(5, 3, 32, 64)
    a = w["blocks.2.mlp.fc1.weight"]
    _ = [w[k] for k in reversed(list(w))]                   # other reads in between change nothing
    assert np.array_equal(a, vit_weights.seeded_weights(5, 3, 32, 64)["blocks.2.mlp.fc1.weight"])
    assert not np.array_equal(a, w["blocks.1.mlp.fc1.weight"])
    assert not np.array_equal(a, vit_weights.seeded_weights(6, 3, 32, 64)["blocks.2.mlp.fc1.weight"])
    assert a.shape == (64, 32) and a.dtype == np.float32
    assert len(w) == 3 * 12 and set(w) == set(vit_weights.block_shapes(3, 32, 64))


def test_uniform_init_has_the_variance_of_the_normal_it_replaces():
    u = uniform(name_rng(0, "x"), (1152, 4304), np.sqrt(3 / 1152))
    assert abs(u.std() * np.sqrt(1152) - 1) < 0.01 and abs(u.mean()) < 1e-3
    assert np.abs(u).max() < np.sqrt(3 / 1152)


def test_threaded_reference_equals_one_evaluation_at_a_time():
    g, data = vit.build(dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=3))
    out, tol = reference.reference_and_tolerance(g, data)
    env, exact = reference.evaluate(g, data), reference.evaluate(g, data, round_f16=False)
    assert out.keys() == {"y"} and np.array_equal(out["y"], env["y"].astype(np.float16))
    top = np.float16(np.abs(env["y"]).max())              # + one f16 ulp of the largest output
    assert tol == 2 * float(np.abs(env["y"] - exact["y"]).max()) + float(np.spacing(top, dtype=np.float16)) > 0

"""FP8 cast inputs centred per channel (model.fp8_centering, compiler/models/centering.py):
the centred parameters compute the same function up to f16 rounding; the centred cast
inputs have per-channel means near zero on the calibration data where the uncentred ones do
not (means taken here by a plain per-layer loop over the captured activations, not by the
module's code); the parameters as given are kept; the trial's input is never looked at."""
import numpy as np
import pytest

from compiler import compare, reference
from compiler.models import vit, vit_config
from compiler.target import ConfigError

TOWER = dict(name="vit", preset="custom", scope="tower", width=32, hidden=64, heads=2, image=28, patch=14,
             layers=3, fp8_activations=True, calibration=1)   # one photo: its own means


def centred_data(data):
    """The data as the device gets it: the centred parameters, not the kept originals."""
    return {n: v for n, v in data.items() if not n.startswith(compare.ORIGINAL)}


def cast_inputs(g, data, inputs):
    """{cast input: [layer][rows, cols] float64}, evaluated with FP16 activations."""
    h = compare.without_casts(g)
    seen = {}

    def capture(j, op, i, env):
        for n in op.inputs:
            if n in ("ln1", "ln2", "attn", "gelu"):
                seen.setdefault(n, {})[i] = np.array(env[n], np.float64)
        return op
    reference.evaluate(h, {**centred_data(data), **inputs}, rewrite=capture)
    return {n: [v[i] for i in sorted(v)] for n, v in seen.items()}


def relative_means(g, data, inputs):
    """Per cast input, the largest over layers of |channel mean over real rows| / rms."""
    keep = compare.real_rows(g, "ln1")
    out = {}
    for n, layers in cast_inputs(g, data, inputs).items():
        worst = 0.0
        for x in layers:
            x = x[keep]
            worst = max(worst, float(np.abs(x.mean(0)).max() / np.sqrt((x ** 2).mean())))
        out[n] = worst
    return out


def calibration_input(spec, data):
    c = vit_config.VitConfig(**spec)
    return vit.calibration_inputs(c, c.dims(), data["pixels"].shape[0], 1)[0]


@pytest.mark.parametrize("centring", ["norms", "norms+attn"])
def test_same_function_up_to_f16_rounding(centring):
    g, data = vit.build(dict(TOWER, fp8_centering=centring))
    g16, data16 = vit.build(dict(TOWER, fp8_activations=False))
    want = reference.run(g16, data16)
    h = compare.without_casts(g)
    got = reference.outputs(h, reference.evaluate(h, centred_data(data)))
    for n in want:
        w, d = want[n].astype(np.float64), got[n].astype(np.float64) - want[n].astype(np.float64)
        assert 0 < np.sqrt((d ** 2).sum() / (w ** 2).sum()) < 3e-3, n      # changed, by f16 rounding only


@pytest.mark.parametrize("centring, centred", [("norms", {"ln1", "ln2"}), ("norms+attn", {"ln1", "ln2", "attn"})])
def test_centred_cast_inputs_have_channel_means_near_zero(centring, centred):
    spec = dict(TOWER, fp8_centering=centring)
    g, data = vit.build(spec)
    g0, data0 = vit.build(dict(TOWER, fp8_centering="none"))
    cal = calibration_input(spec, data)
    after, before = relative_means(g, data, cal), relative_means(g0, data0, cal)
    for n in centred:           # what is left is f16 rounding of the centred biases
        assert after[n] < 0.05 and after[n] < before[n] / 20, (n, after[n], before[n])
    for n in {"ln1", "ln2", "attn", "gelu"} - centred:
        assert after[n] > 0.2, (n, after[n])       # left as it is


def test_parameters_as_given_are_kept_and_the_input_never_looked_at(tmp_path):
    g, data = vit.build(TOWER)
    _, data16 = vit.build(dict(TOWER, fp8_activations=False))
    kept = {n[len(compare.ORIGINAL):] for n in data if n.startswith(compare.ORIGINAL)}
    assert kept == {"norm1.bias", "norm2.bias", "attn.qkv.bias", "mlp.fc1.bias"}
    for n in kept:
        assert np.array_equal(data[compare.ORIGINAL + n], data16[n]), n
        assert not np.array_equal(data[n], data16[n]), n
    pix = np.random.default_rng(5).uniform(-1, 1, (1, 3, 28, 28)).astype(np.float32) * 0.1
    np.save(tmp_path / "x.npy", pix)
    _, d2 = vit.build(dict(TOWER, input=str(tmp_path / "x.npy")))
    assert all(np.array_equal(d2[n], data[n]) for n in kept)
    _, none = vit.build(dict(TOWER, fp8_centering="none"))
    assert not any(n.startswith(compare.ORIGINAL) for n in none)


def test_unknown_centring_is_a_config_error():
    with pytest.raises(ConfigError, match="fp8_centering"):
        vit.build(dict(TOWER, fp8_centering="yes"))

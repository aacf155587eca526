"""FP8 activation scales calibrated offline (model.fp8_scales=calibrated): one scale per
cast per layer, from seeded calibration inputs, never the trial's input; tighter than
the static bounds; a cast never clips its own calibration data (headroom >= 1)."""
import numpy as np

from compiler.models import vit
from compiler.models.calibrate import cast_amax

TOWER = dict(name="vit", preset="custom", scope="tower", width=32, hidden=64, heads=2, image=28, patch=14,
             layers=3, fp8_activations=True, fp8_scales="calibrated")


def scales(g):
    return {op.outputs[0]: np.array(op.attr("scale")) for op in g.ops if op.kind == "cast"}


def test_per_layer_and_independent_of_the_trial_input(tmp_path):
    g, data = vit.build(TOWER)
    s = scales(g)
    assert set(s) == {"ln1.fp8", "attn.fp8", "ln2.fp8", "gelu.fp8"}
    assert all(v.shape == (3,) and len(set(v)) == 3 for v in s.values())
    assert all(g.tensors[n].scale == tuple(v) for n, v in s.items())
    pix = np.random.default_rng(5).uniform(-1, 1, (1, 3, 28, 28)).astype(np.float32) * 0.1
    np.save(tmp_path / "x.npy", pix)
    g2, d2 = vit.build(dict(TOWER, input=str(tmp_path / "x.npy")))
    assert not np.array_equal(d2["pixels"], data["pixels"])
    assert all(np.array_equal(scales(g2)[n], v) for n, v in s.items())           # the input is never looked at
    g3, _ = vit.build(dict(TOWER, calibration=2))
    assert any(not np.array_equal(scales(g3)[n], v) for n, v in s.items())


def test_tighter_than_bounds_and_no_clipping_of_the_calibration_data():
    g, data = vit.build(dict(TOWER, fp8_headroom=1.0))
    gb, _ = vit.build(dict(TOWER, fp8_scales="bound"))
    for n, v in scales(g).items():
        assert (v < scales(gb)[n]).all(), n
    from compiler.models.vit import VitConfig, calibration_inputs
    c = VitConfig(**dict(TOWER, fp8_headroom=1.0))
    d = c.dims()
    amax = cast_amax(g, data, calibration_inputs(c, d, data["pixels"].shape[0], 1)[0])
    for n, a in amax.items():
        assert np.allclose(a / vit.FP8_MAX, g.ops[n].attr("scale"))

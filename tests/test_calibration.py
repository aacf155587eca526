"""FP8 activation scales calibrated offline (model.fp8_scales=calibrated, least_error): one
scale per cast per layer, from seeded calibration inputs, never the trial's input; tighter
than the static bounds; a cast never clips its own calibration data (headroom >= 1); the
least-error scale is the best of its candidates by a brute-force count over every element."""
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


def test_least_error_is_the_best_candidate_by_brute_force(tmp_path):
    """Each cast's least-error scale, per layer: within one binade above headroom × the
    calibration image's amax / 448 (so it never clips that image), a step of 2^(1/16),
    and no other such step rounds that layer's cast input on the calibration image (every
    element, rounded here directly, not through the f16 histogram) with a smaller squared
    error. The trial's input is never looked at."""
    from compiler import reference
    from compiler.models.gemm import FP8
    from compiler.models.vit import VitConfig, calibration_inputs
    spec = dict(TOWER, fp8_scales="least_error", fp8_headroom=1.5)
    g, data = vit.build(spec)
    c = VitConfig(**spec)
    (inputs,) = calibration_inputs(c, c.dims(), data["pixels"].shape[0], 1)
    seen = {}

    def keep(n, op, i, env):          # the graph's own chosen scales; record each cast's input
        if op.kind == "cast":
            seen[op.outputs[0], i] = np.asarray(env[op.inputs[0]], np.float64), op.attr("scale")
        return op

    reference.evaluate(g, {**data, **inputs}, rewrite=keep)
    assert len(seen) == 4 * 3
    moved = 0
    for (name, i), (x, s) in seen.items():
        floor = 1.5 * np.abs(x).max() / vit.FP8_MAX
        assert floor <= s < 2 * floor, (name, i)

        def err(scale):
            q = np.clip(x / scale, -vit.FP8_MAX, vit.FP8_MAX).astype(FP8).astype(np.float64) * scale
            return ((q - x) ** 2).sum()
        m0 = np.ceil(np.log2(floor) * 16 - 1e-9)
        steps = [2.0 ** ((m0 + k) / 16) for k in range(16)]         # [floor, 2 floor) in 2^(1/16)
        assert min(abs(s / o - 1) for o in steps) < 1e-9, (name, i, s)
        assert err(s) <= min(err(o) for o in steps) * (1 + 1e-12), (name, i)
        moved += err(s) < err(steps[0])
    assert moved >= 6                  # the search moves most scales off the first step
    pix = np.random.default_rng(5).uniform(-1, 1, (1, 3, 28, 28)).astype(np.float32) * 0.1
    np.save(tmp_path / "x.npy", pix)
    g2, _ = vit.build(dict(spec, input=str(tmp_path / "x.npy")))
    assert scales(g2).keys() == scales(g).keys()
    assert all(np.array_equal(scales(g2)[n], v) for n, v in scales(g).items())

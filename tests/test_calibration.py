"""FP8 activation scales calibrated offline (model.fp8_scales=calibrated, least_error): one
scale per cast per layer, from the CALIBRATION photos (compiler/models/photos.py, downscaled
by the model's own preprocessing), never the trial's input nor a held-out photo; tighter than
the static bounds; a cast never clips its calibration data (headroom >= 1); the least-error
scale is the best of its candidates by a brute-force count over every element; the f16
fallback (model.fp8_fallback) takes out exactly the casts whose measured calibration error
is over the limit, and its ablation keeps them; the clipped fraction the reference phase
reports equals a plain count over the cast inputs, here, sharing no code with calibrate.py."""
import dataclasses

import numpy as np
import pytest

from compiler import reference
from compiler.models import calibrate, photos, vit, vit_config
from compiler.models.calibrate import cast_amax
from compiler.phases import ModelResult, compile_trial, reference_phase
from helpers import target_cfg

TOWER = dict(name="vit", preset="custom", scope="tower", width=32, hidden=64, heads=2, image=28, patch=14,
             layers=3, fp8_activations=True, fp8_scales="calibrated")


def scales(g):
    return {op.outputs[0]: np.array(op.attr("scale")) for op in g.ops if op.kind == "cast"}


def samples(spec, data):
    c = vit_config.VitConfig(**spec)
    return vit.calibration_inputs(c, c.dims(), data["pixels"].shape[0], 1)


def test_per_layer_and_independent_of_the_trial_input(tmp_path):
    g, data = vit.build(TOWER)
    s = scales(g)
    assert set(s) == {"ln1.fp8", "qkv.fp8", "attn.fp8", "ln2.fp8", "gelu.fp8"}   # calibrated: no fallback
    assert all(v.shape == (3,) and len(set(v)) == 3 for v in s.values())
    assert all(g.tensors[n].scale == tuple(v) for n, v in s.items())
    pix = np.random.default_rng(5).uniform(-1, 1, (1, 3, 28, 28)).astype(np.float32) * 0.1
    np.save(tmp_path / "x.npy", pix)
    g2, d2 = vit.build(dict(TOWER, input=str(tmp_path / "x.npy")))
    assert not np.array_equal(d2["pixels"], data["pixels"])
    assert all(np.array_equal(scales(g2)[n], v) for n, v in s.items())           # the input is never looked at
    g3, _ = vit.build(dict(TOWER, calibration=2))
    assert any(not np.array_equal(scales(g3)[n], v) for n, v in s.items())


@pytest.mark.parametrize("scales_, n", [("calibrated", 6), ("least_error", 6), ("least_error", 2)])
def test_calibration_reads_only_calibration_photos_never_the_trials_input(tmp_path, monkeypatch, scales_, n):
    """Every photo the build opens is one of the first n CALIBRATION photos (the held-out
    trial input, given as its pixels, is opened by the test, not the build), and no
    evaluation the calibration runs is fed the trial's pixel rows."""
    trial = calibrate.tower_input([calibrate.photo_pixels(photos.DEFAULT, 28, 1.0, (0.5,) * 3, (0.5,) * 3)],
                                  vit_config.VitConfig(**TOWER).dims(), 4)["pixels"]     # 2 x 2 patches
    np.save(tmp_path / "x.npy", calibrate.photo_pixels(photos.DEFAULT, 28, 1.0, (0.5,) * 3, (0.5,) * 3))
    opened, fed = [], []
    load, evaluate = photos.load, reference.evaluate
    monkeypatch.setattr(photos, "load", lambda spec: opened.append(photos.name_of(spec) if photos.is_photo(spec) else spec) or load(spec))
    monkeypatch.setattr(reference, "evaluate", lambda g, d, *a, **k: fed.append(d["pixels"]) or evaluate(g, d, *a, **k))
    g, data = vit.build(dict(TOWER, fp8_scales=scales_, calibration=n, input=str(tmp_path / "x.npy")))
    assert np.array_equal(data["pixels"], trial)
    assert sorted(set(opened)) == sorted(photos.CALIBRATION[:n]) and not set(opened) & set(photos.HELD_OUT)
    assert fed and not any(np.array_equal(p, trial) for p in fed)
    assert not set(photos.CALIBRATION) & set(photos.HELD_OUT) and photos.DEFAULT in photos.HELD_OUT


def test_tighter_than_bounds_and_no_clipping_of_the_calibration_data():
    spec = dict(TOWER, fp8_headroom=1.0)
    g, data = vit.build(spec)
    gb, _ = vit.build(dict(TOWER, fp8_scales="bound"))
    for n, v in scales(g).items():
        assert (v < scales(gb)[n]).all(), n
    amax = {}
    for inputs in samples(spec, data):
        for n, a in cast_amax(g, data, inputs).items():
            amax[n] = np.maximum(amax.get(n, 0), a)
    for n, a in amax.items():                      # the largest over the calibration photos, headroom 1
        assert np.allclose(a / vit.FP8_MAX, g.ops[n].attr("scale"))


def test_least_error_is_the_best_candidate_by_brute_force(tmp_path):
    """Each cast's least-error scale, per layer: within one binade above headroom × the
    calibration photo's amax / 448 (so it never clips that photo), a step of 2^(1/16),
    and no other such step rounds that layer's cast input on the calibration photo (every
    element, rounded here directly, not through the f16 histogram) with a smaller squared
    error. The trial's input is never looked at. (One calibration photo, no fallback: the
    scales the graph holds are then those the search chose on it.)"""
    from compiler.models.gemm import FP8
    spec = dict(TOWER, fp8_scales="least_error", fp8_headroom=1.5, calibration=1, fp8_fallback=False)
    g, data = vit.build(spec)
    (inputs,) = samples(spec, data)
    seen = {}

    def keep(n, op, i, env):          # the graph's own chosen scales; record each cast's input
        if op.kind == "cast":
            seen[op.outputs[0], i] = np.asarray(env[op.inputs[0]], np.float64), op.attr("scale")
        return op

    reference.evaluate(g, {**data, **inputs}, rewrite=keep)
    assert len(seen) == 5 * 3
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


def token_errors(g, data, inputs):
    """Per cast input, over layers and calibration inputs: the rms of (the cast's rounding of
    its input at the graph's scales - the input) over the rms of the input less its column
    means, both over the 4 rows (2 × 2 patches: every row real).
    Written here from the definition: the cast rounded by ml_dtypes, the rows counted by hand."""
    from compiler.models.gemm import FP8
    num, den = {}, {}

    def look(n, op, i, env):
        if op.kind == "cast":
            x = np.asarray(env[op.inputs[0]], np.float64)[:4]
            s = op.attr("scale")
            q = np.clip(x / s, -448, 448).astype(FP8).astype(np.float64) * s
            num[op.inputs[0]] = num.get(op.inputs[0], 0) + ((q - x) ** 2).sum()
            den[op.inputs[0]] = den.get(op.inputs[0], 0) + ((x - x.mean(0)) ** 2).sum()
        return op
    for inp in inputs:
        reference.evaluate(g, {**data, **inp}, rewrite=look)
    return {n: np.sqrt(num[n] / den[n]) for n in num}


def test_fallback_takes_out_the_casts_over_the_limit_and_its_ablation_keeps_them():
    spec = dict(TOWER, fp8_scales="least_error", calibration=1)
    g0, d0 = vit.build(dict(spec, fp8_fallback=False))
    CASTS = {"ln1", "qkv", "attn", "ln2", "gelu"}        # qkv: model.fp8_scores
    assert {op.inputs[0] for op in g0.ops if op.kind == "cast"} == CASTS
    assert "fp8_fallback" not in g0.meta and set(g0.meta["fp8_cast_error"]) == CASTS
    err = token_errors(g0, d0, samples(spec, d0))
    assert g0.meta["fp8_cast_error"] == pytest.approx(err, abs=1e-6)      # what calibration measured (6 decimals)
    order = sorted(err, key=err.get)
    assert err["attn"] == max(err.values())           # the attention output: most of it common to every token
    for k in range(1, len(CASTS)):                     # a limit between each pair of measured errors
        limit = (err[order[k - 1]] + err[order[k]]) / 2
        g, d = vit.build(dict(spec, fp8_fallback_error=float(limit)))
        assert g.meta["fp8_fallback"] == sorted(order[k:]), (limit, err)
        assert {op.inputs[0] for op in g.ops if op.kind == "cast"} == set(order[:k])
        for j, op in enumerate(g.ops):                 # the f16 input goes straight to its matmul
            if op.kind == "matmul" and op.inputs[0] in order[k:]:
                assert g.tensors[op.inputs[0]].dtype == "f16"
        assert len(g.ops) == len(g0.ops) - (len(CASTS) - k)
        assert g.repeat.stop - g.repeat.first == g0.repeat.stop - g0.repeat.first - (len(CASTS) - k)
        for n in order[:k]:                            # the scales of the casts kept: as without the fallback
            assert g.tensors[n + ".fp8"].scale == g0.tensors[n + ".fp8"].scale


def test_default_fallback_compiles_validates_and_costs_fewer_errors():
    """The default (attn kept in f16 on the calibration photos) runs on the simulator and
    validates; against FP16 activations it errs less than its ablation; the planner prices
    the f16 matmul and the cast it drops (a different estimate: on this tiny tower popops'
    Cast1D estimate, ~300 cycles of vertex overhead a block, outweighs the f16 AMP's extra
    passes, so there the fallback is the cheaper plan)."""
    runs = {}
    for fb in (True, False):
        cfg = dict(model=dict(TOWER, fp8_scales="least_error", fp8_fallback=fb), target=target_cfg("tiny"),
                   policy=dict(fp8_budget_embedding=0.2, fp8_budget_features=0.2))   # a tiny tower's (plants.TINY_FP8_BUDGET)
        runs[fb] = compile_trial(cfg)
    assert runs[True]["model"].graph.meta["fp8_fallback"] == ["attn"]
    for r in runs.values():
        assert r["run"].validated, r["run"].metrics()
    err = {fb: r["reference"].fp8_activation_error for fb, r in runs.items()}
    assert err[True] < err[False], err
    assert runs[True]["plan"].metrics()["best_cycles_estimate"] != runs[False]["plan"].metrics()["best_cycles_estimate"]


def clipped_by_hand(g, data):
    """{cast input: [fraction per layer]}: elements of the 4 rows (every row real) with
    |x| > 448 · the cast's scale, counted one element at a time."""
    counts = {}

    def look(n, op, i, env):
        if op.kind == "cast":
            x, lim, c = env[op.inputs[0]], 448.0 * float(op.attr("scale")), 0
            for r in range(4):
                for v in x[r].tolist():
                    c += abs(v) > lim
            counts.setdefault(op.inputs[0], []).append(c / (4 * x.shape[1]))
        return op
    reference.evaluate(g, data, rewrite=look)
    return counts


def test_clipped_fraction_is_a_plain_count():
    g, data = vit.build(dict(TOWER, fp8_scales="least_error"))
    m = reference_phase(ModelResult(g, data)).metrics()
    assert m["fp8_clipped_max"] == 0 and 0 < m["fp8_peak_max"] < 1           # no clipping at these scales
    j = next(j for j, op in enumerate(g.ops) if op.kind == "cast" and op.inputs[0] == "ln2")
    s = list(g.ops[j].attr("scale"))
    s[1] /= 16                                   # layer 1's ln2 cast: a range 16x too small
    g.ops[j] = dataclasses.replace(g.ops[j], attrs=(("scale", tuple(s)),))
    g.tensors["ln2.fp8"] = dataclasses.replace(g.tensors["ln2.fp8"], scale=tuple(s))
    r = reference_phase(ModelResult(g, data))
    want = clipped_by_hand(g, data)
    assert set(r.fp8_clipping) == set(want) == {"ln1", "qkv", "ln2", "gelu"}
    for n, v in want.items():
        assert r.fp8_clipping[n]["clipped"].tolist() == pytest.approx(v, abs=0), n
    assert want["ln2"][1] > 0 and want["ln2"][0] == 0
    m = r.metrics()
    assert m["fp8_clipped.ln2"] == round(max(want["ln2"]), 9) == m["fp8_clipped_max"] and m["fp8_peak_max"] > 1


def test_more_calibration_photos_than_there_are_is_a_config_error():
    from compiler.target import ConfigError
    with pytest.raises(ConfigError, match=r"model.calibration=7: there are 6 calibration photos"):
        vit.build(dict(TOWER, calibration=7))
    with pytest.raises(ConfigError, match="model.fp8_calibration='noise'"):
        vit.build(dict(TOWER, fp8_calibration="noise"))
    with pytest.raises(ConfigError, match="model.fp8_fallback_error=0"):
        vit.build(dict(TOWER, fp8_fallback_error=0))
    vit.build(dict(TOWER, calibration=7, fp8_calibration="seeded", layers=1))       # seeded: as many as asked


def token_errors_per_image(g, data, inputs, B):
    """token_errors for a batch of B images: each image's rows centred on its own column
    means (what differs between the images is no token-to-token part); also returns the
    same figures centred over the whole batch, the mistake the test must tell apart."""
    from compiler.models.gemm import FP8
    T = g.tensors["pixels"].shape[0] // B
    num, den, whole = {}, {}, {}

    def look(n, op, i, env):
        if op.kind == "cast":
            x = np.asarray(env[op.inputs[0]], np.float64)
            s, k = op.attr("scale"), op.inputs[0]
            for b in range(B):
                r = x[b * T:b * T + 4]
                q = np.clip(r / s, -448, 448).astype(FP8).astype(np.float64) * s
                num[k] = num.get(k, 0) + ((q - r) ** 2).sum()
                den[k] = den.get(k, 0) + ((r - r.mean(0)) ** 2).sum()
            r = np.concatenate([x[b * T:b * T + 4] for b in range(B)])
            whole[k] = whole.get(k, 0) + ((r - r.mean(0)) ** 2).sum()
        return op
    for inp in inputs:
        reference.evaluate(g, {**data, **inp}, rewrite=look)
    return {n: np.sqrt(num[n] / den[n]) for n in num}, {n: np.sqrt(num[n] / whole[n]) for n in num}


def test_a_batch_measures_each_images_token_to_token_part():
    """With B images to an input the fallback's figure centres each image on its own means:
    centred over the batch, the images' differences swelled the denominator and a B = 6 So400m
    batch kept no cast in f16 (attn 0.043 against 0.638 alone) and missed its FP8 budget."""
    spec = dict(TOWER, fp8_scales="least_error", calibration=2, batch=2, fp8_fallback=False)
    g, d = vit.build(spec)
    c = vit_config.VitConfig(**spec)
    inputs = vit.calibration_inputs(c, c.dims(), g.tensors["pixels"].shape[0] // 2, 2)
    assert len(inputs) == 1                              # the two photos in one input
    per_image, whole = token_errors_per_image(g, d, inputs, 2)
    assert g.meta["fp8_cast_error"] == pytest.approx(per_image, abs=1e-6)
    assert any(abs(whole[n] - per_image[n]) > 1e-3 for n in per_image)    # the test tells the two apart


def test_photo_held_out_is_the_batchs_first_held_out_photos():
    """model.input=photo:held_out (one spec for a sweep over model.batch) reads as the first
    model.batch held-out photos, repeated past 8: the same pixels as that list written out,
    and never a calibration photo."""
    for b in (1, 3, 10):
        want = [photos.PREFIX + photos.HELD_OUT[i % len(photos.HELD_OUT)] for i in range(b)]
        assert vit_config.VitConfig(input=photos.HELD_OUT_SET, batch=b).input == want
    spec = dict(TOWER, fp8_activations=False, batch=2)
    _, named = vit.build(dict(spec, input=photos.HELD_OUT_SET))
    _, listed = vit.build(dict(spec, input=["photo:astronaut", "photo:rocket"]))
    _, swapped = vit.build(dict(spec, input=["photo:rocket", "photo:astronaut"]))
    assert np.array_equal(named["pixels"], listed["pixels"]) and not np.array_equal(named["pixels"], swapped["pixels"])
    assert not set(photos.held_out(16)) & {photos.PREFIX + n for n in photos.CALIBRATION}

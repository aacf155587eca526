"""What FP8 activations cost, reported by every FP8-activation trial: the reference's
outputs and the device's against the same model built with FP16 activations. The FP16
model here is built by the model builder itself (fp8_activations=false), not by taking the
casts out of the FP8 graph as the reference phase does, and the rms is written out here."""
import numpy as np
import pytest

from compiler import compare, reference
from compiler.models import vit
from compiler.phases import compile_trial
from helpers import target_cfg

VIT = dict(name="vit", preset="custom", scope="tower", width=32, hidden=64, heads=2, image=28, patch=14,
           layers=3, fp8_activations=True)


def rms(got: dict, want: dict, keep: dict) -> float:
    num = sum(float(((got[n][keep[n]].astype(np.float64) - w[keep[n]].astype(np.float64)) ** 2).sum())
              for n, w in want.items())
    den = sum(float((w[keep[n]].astype(np.float64) ** 2).sum()) for n, w in want.items())
    return float(np.sqrt(num / den))


@pytest.mark.parametrize("scales, centring", [("bound", "norms"), ("calibrated", "norms"), ("least_error", "norms"),
                                              ("least_error", "none"), ("least_error", "norms+attn")])
def test_casts_taken_out_give_the_fp16_model(scales, centring):
    """The reference phase's FP16 outputs (the FP8 graph with its casts taken out, and its
    parameters as given where centring changed them) equal, bit for bit, the reference of
    the model built with FP16 activations."""
    g, data = vit.build(dict(VIT, fp8_scales=scales, fp8_centering=centring))
    g16, data16 = vit.build(dict(VIT, fp8_activations=False))
    got = compare.fp16_activations(g, data)
    want = reference.run(g16, data16)
    assert set(got) == set(want)
    for n in want:
        assert np.array_equal(got[n].view(np.uint16), want[n].view(np.uint16)), n
    assert compare.fp16_activations(g16, data16) is None          # nothing cast: nothing to report


def test_trial_reports_its_error_against_fp16_activations():
    # the tiny tower's own FP8 accuracy budgets (the defaults are the So400m tower's; plants.TINY_FP8_BUDGET)
    r = compile_trial(dict(model=VIT, target=target_cfg("tiny"), policy=dict(fp8_budget_embedding=0.2,
                                                                             fp8_budget_features=0.2)))
    ref, run = r["reference"], r["run"]
    assert run.validated
    g16, data16 = vit.build(dict(VIT, fp8_activations=False))
    want = reference.run(g16, data16)
    keep = {n: compare.real_rows(g16, n) for n in want}
    device = {n: v.astype(np.float16) for n, v in run.outputs.items()}
    assert ref.metrics()["fp8_activation_error"] == pytest.approx(rms(ref.outputs, want, keep), rel=1e-6)
    assert run.metrics()["rms_rel_error_vs_fp16_activations"] == pytest.approx(rms(device, want, keep), rel=1e-6)
    assert 0.005 < run.rms_rel_error_vs_fp16 < 0.2           # FP8's 3-bit mantissa: a few per cent
    r16 = compile_trial(dict(model=dict(VIT, fp8_activations=False), target=target_cfg("tiny"), policy={}))
    assert "fp8_activation_error" not in r16["reference"].metrics()
    assert "rms_rel_error_vs_fp16_activations" not in r16["run"].metrics()


def test_a_batch_is_held_to_the_budget_image_by_image():
    """A batch's FP8 budget holds for each image, not only for the B images' mean: one image
    4 % off and one exact average to ~2.8 %, under a 3 % budget, and still fail it (figures
    counted here by hand from the rows of each image)."""
    from compiler.run import fp8_accuracy, over_budget
    g, _ = vit.build(dict(VIT, fp8_scales="bound", batch=2))
    rng = np.random.default_rng(5)
    want = {n: rng.standard_normal(g.tensors[n].shape).astype(np.float16) for n in ("embedding", "features")}
    got = {n: w.copy() for n, w in want.items()}
    keep = {n: compare.real_rows(g, n) for n in want}
    for n, w in got.items():                       # image 1's real rows off by 4 % of their rms
        half = w.shape[0] // 2
        rows = np.nonzero(keep[n][half:])[0] + half
        w[rows] = (w[rows].astype(np.float64) * 1.04).astype(np.float16)
    acc = fp8_accuracy(g, got, want, {"embedding": 0.03, "features": 0.05})
    e = acc["embedding"]
    first, second = (np.arange(len(keep["embedding"])) < 1), (np.arange(len(keep["embedding"])) >= 1)
    by_hand = [rms({"embedding": got["embedding"]}, {"embedding": want["embedding"]},
                   {"embedding": keep["embedding"] & m}) for m in (first, second)]
    assert e["rms_rel_error"] < 0.03 < e["worst_image_rms_rel_error"]
    assert e["worst_image_rms_rel_error"] == pytest.approx(max(by_hand), abs=1e-9) and by_hand[0] == 0
    assert not e["ok"] and acc["features"]["ok"]
    assert "embedding rms" in over_budget(acc) and "worst image" in over_budget(acc)
    one, _ = vit.build(dict(VIT, fp8_scales="bound"))          # one image: no per-image figure
    w1 = {n: want[n][:one.tensors[n].shape[0]] for n in want}
    assert all("worst_image_rms_rel_error" not in f for f in fp8_accuracy(one, w1, w1, {"embedding": 0.03,
                                                                                     "features": 0.05}).values())

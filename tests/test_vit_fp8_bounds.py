"""The FP8 activation casts of the ViT take their scales from bounds that hold for any
input: a cast input never exceeds its scale's range (so the saturating cast never
clips), and the bound is tight (an adversarial token gets within 2x of it)."""
import numpy as np

from compiler import reference
from compiler.models import vit

CFG = dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=2,
           fp8_activations=True, fp8_scales="bound")


def casts(g):
    """Each cast's range (scale · 448) in the last layer: what `evaluate` leaves in env."""
    return {op.inputs[0]: op.attr("scale")[-1] * vit.FP8_MAX for op in g.ops if op.kind == "cast"}


def test_casts_cover_every_weight_matmul():
    g, _ = vit.build(CFG)
    fp8_in = [op for op in g.ops if op.kind == "matmul" and g.tensors[op.inputs[1]].kind == "param"]
    assert len(fp8_in) == 4 and all(g.tensors[op.inputs[0]].dtype == "fp8" for op in fp8_in)
    assert set(casts(g)) == {"ln1", "qkv", "attn", "ln2", "gelu"}          # qkv: q and k (model.fp8_scores)


def test_bounds_hold_for_any_input():
    g, data = vit.build(CFG)
    rng = np.random.default_rng(1)
    bounds = casts(g)
    for x in (data["x"], 100 * rng.standard_normal(data["x"].shape), rng.standard_cauchy(data["x"].shape)):
        env = reference.evaluate(g, {**data, "x": x.astype(np.float16)})
        for name, b in bounds.items():
            assert np.abs(env[name]).max() <= b, name


def test_attention_bound_is_tight():
    """A token whose normalised row is aligned with γ⊙W_v[:, j] drives V_j (and so the
    attention output, a convex combination of V rows) near the Cauchy-Schwarz bound."""
    g, data = vit.build({**CFG, "layers": 1})
    D = 32
    gam = data["norm1.weight"][0, 0].astype(np.float64)
    w = data["attn.qkv.weight"][0].astype(np.float64) * g.tensors["attn.qkv.weight"].scale[0]
    j = np.argmax(np.linalg.norm(gam[:, None] * w[:, 2 * D:], axis=0))
    x = np.tile(gam * w[:, 2 * D + j], (data["x"].shape[0], 1))
    env = reference.evaluate(g, {**data, "x": x.astype(np.float16)})
    assert 0.5 * casts(g)["attn"] < np.abs(env["attn"]).max() <= casts(g)["attn"]

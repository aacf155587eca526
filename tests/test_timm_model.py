"""The independent model (compiler/timm_model.py) and the model check of a trial
(compiler/model_check.py, models/export.py).

- against timm itself: the fixture's outputs (tests/fixtures/timm/outputs.npz, made by
  timm 1.0.31) on its own weights;
- the export: the state dict the model phase says it runs, fed to the independent model,
  gives timm's outputs on the FP8-rounded checkpoint (a wrong name, layout or fold shows);
- determinism: the matmul's bytes are the naive k-ordered sum's, whatever the thread count;
- planted wrong model definitions (the graph builder patched: attention scale 1/√(d+1),
  GELU tanh for erf, no pos_embed, LayerNorm eps 1e-5 for 1e-6, q and k swapped, a wrong
  MAP latent) each make a tiny-target trial `validated: false`, its reason naming "model",
  while the same trial unpatched validates; on several bundled photos."""
import dataclasses
import json

import numpy as np
import pytest

from compiler import model_check, timm_model
from compiler.ir import Tensor
from compiler.models import MODELS
from compiler.models.export import TimmState, image_pixels
from compiler.phases import compile_trial, model_phase
from conftest import REPO
from helpers import target_cfg

from test_tower_timm import FIX, TOWERS   # the fixture's two towers
ARCH = {"siglip": timm_model.Arch(2, 2, "map", patch=14), "b16": timm_model.Arch(2, 2, "token", patch=16)}


def rms_rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.sqrt(((a - b) ** 2).mean() / (b ** 2).mean()))


def fixture_model(tower, **extra):
    return {**TOWERS[tower], "weights": str(FIX / f"{tower}.safetensors"), "input": str(FIX / "image.png"), **extra}


@pytest.mark.parametrize("tower", list(TOWERS))
def test_independent_model_is_timms(tower):
    from safetensors.numpy import load_file
    fx = np.load(FIX / "outputs.npz")
    assert str(fx[f"{tower}/source"]).startswith("timm ")
    out = timm_model.forward(load_file(str(FIX / f"{tower}.safetensors")), fx[f"{tower}/pixels"], ARCH[tower])
    for name, v in out.items():
        assert rms_rel(v, fx[f"{tower}/fp32/{name}"]) <= 2e-6, name      # timm ran in float32


@pytest.mark.parametrize("tower", list(TOWERS))
def test_export_is_the_checkpoint_as_the_device_holds_it(tower):
    """timm's names, every one of the checkpoint's; fed with the pixels the device received,
    the independent model gives timm's outputs on the FP8-rounded weights (the pixels' and
    the class row's f16 roundings apart)."""
    from safetensors.numpy import load_file
    fx = np.load(FIX / "outputs.npz")
    m = model_phase(dict(model=fixture_model(tower)))
    sd = TimmState(m.graph, m.data)
    ckpt = load_file(str(FIX / f"{tower}.safetensors"))
    assert set(sd) == set(ckpt)
    assert all(sd[k].shape == ckpt[k].shape for k in ckpt)
    out = timm_model.forward(sd, image_pixels(m.graph, m.data, 0), ARCH[tower])
    for name, v in out.items():
        assert rms_rel(v, fx[f"{tower}/fp8/{name}"]) <= 1e-3, (name, rms_rel(v, fx[f"{tower}/fp8/{name}"]))
        # and not the unrounded weights': the export is what the device holds
        assert rms_rel(v, fx[f"{tower}/fp32/{name}"]) > 3e-3


def test_fp8_weights_decode_to_their_codes_values():
    """The export's compiled table lookup gives each FP8 code's value times the scale, as
    ml_dtypes' own cast does (NaN codes included), every code in a shuffled order."""
    from compiler.models import export
    from compiler.models.gemm import FP8
    codes = np.random.default_rng(5).permutation(np.arange(256, dtype=np.uint8).repeat(7))
    tab = np.arange(256, dtype=np.uint8).view(FP8).astype(np.float64) * 0.375
    out = np.empty(codes.shape)
    export._decode(codes, tab, out)
    assert np.array_equal(out, codes.view(FP8).astype(np.float64) * 0.375, equal_nan=True)


def test_matmul_is_the_k_ordered_sum_whatever_the_threads(monkeypatch):
    rng = np.random.default_rng(3)   # k = 2 x 128 + 47: blocks of _KC terms, four a pass, then three
    a, b = rng.standard_normal((150, 303)), rng.standard_normal((303, 520))
    naive = np.zeros((150, 520))
    for k in range(303):             # elementwise IEEE products and sums, in k order
        naive = naive + a[:, k:k + 1] * b[k]
    for threads in (1, 2, 3):
        monkeypatch.setattr(timm_model, "THREADS", threads)
        assert np.array_equal(timm_model.matmul(a, b), naive), threads


def test_model_outputs_do_not_depend_on_threads(monkeypatch):
    m = model_phase(dict(model=fixture_model("siglip")))
    one = model_check.model_outputs(m.graph, m.data)
    monkeypatch.setattr(timm_model, "THREADS", 3)
    again = model_check.model_outputs(m.graph, m.data)
    assert all(np.array_equal(one[k], again[k]) for k in one)


def test_presets_are_checked_against_timms_definitions():
    """model.eps / model.gelu set on a preset do not move the independent model: it is timm's."""
    for preset in ("so400m", "b16"):
        m = dict(name="vit", preset=preset, scope="tower", layers=1, eps=1e-5, gelu="tanh", input="")
        g = model_phase(dict(model=m)).graph
        arch = model_check.arch_of(g.meta["timm"])
        assert (arch.eps, arch.gelu) == (1e-6, "erf")
    g = model_phase(dict(model=dict(TOWERS["siglip"], eps=1e-5, gelu="tanh"))).graph
    assert (model_check.arch_of(g.meta["timm"]).eps, model_check.arch_of(g.meta["timm"]).gelu) == (1e-5, "tanh")


def test_bound_from_the_precisions():
    """FP16 activations: 0.2-0.3 % at 4 layers (u = 2^-11 over ~70 roundings); FP8
    activations add an e4m3 rounding (u = 2^-4) for each FP8 operand a layer's matmuls read:
    QKV's, fc1's and fc2's inputs and q and k (model.fp8_scores); proj's
    input stays f16 (the calibration's fallback)."""
    g = model_phase(dict(model=dict(TOWERS["siglip"], layers=4))).graph
    assert 2e-3 < model_check.bound(g, "embedding") < 3e-3
    g8 = model_phase(dict(model=dict(TOWERS["siglip"], layers=4, fp8_activations=True))).graph
    assert model_check.fp8_roundings(g8) == 5 and model_check.fp8_roundings(g) == 4   # attn's cast kept in f16
    assert 0.1 < model_check.bound(g8, "embedding") < 0.2


# --- planted wrong model definitions: the graph builder writes a wrong model -------------

def _replace(g, pick, **attrs):
    hits = [j for j, op in enumerate(g.ops) if pick(op)]
    assert hits, "the fault found no op to change"
    for j in hits:
        op = g.ops[j]
        g.ops[j] = dataclasses.replace(op, attrs=tuple(sorted({**dict(op.attrs), **attrs}.items())))


def _scores(op):
    return op.kind == "matmul" and op.attr("transpose_b") and op.inputs[0] == "qkv"


def scale(g, data):
    hd = next(op for op in g.ops if _scores(op)).attr("k")
    _replace(g, _scores, scale=1 / np.sqrt(hd + 1))


def gelu_tanh(g, data):
    _replace(g, lambda op: op.kind == "gelu", approx="tanh")


def eps(g, data):
    _replace(g, lambda op: op.kind == "layernorm", eps=1e-5)


def qk_swapped(g, data):
    op = next(op for op in g.ops if _scores(op))
    _replace(g, _scores, groups=tuple((a, kc, b, qc, o, oc) for a, qc, b, kc, o, oc in op.attr("groups")))


def _reread(g, data, old, new, value):
    """The graph reads tensor `new` (holding `value`) where the model reads `old`."""
    t = g.tensors[old]
    g.add(Tensor(new, t.shape, t.dtype, t.kind, t.scale))
    data[new] = value
    g.ops[:] = [dataclasses.replace(op, inputs=tuple(new if n == old else n for n in op.inputs)) for op in g.ops]


def no_pos_embed(g, data):
    _reread(g, data, "pos_embed", "pos_embed.none", np.zeros_like(data["pos_embed"]))


def latent(g, data):
    _reread(g, data, "attn_pool.latent", "attn_pool.latent.wrong", data["attn_pool.latent"][..., ::-1].copy())


FAULTS = {"scale": scale, "gelu_tanh": gelu_tanh, "no_pos_embed": no_pos_embed, "eps": eps,
          "qk_swapped": qk_swapped, "latent": latent}


def _checkpoint(tmp_path, name, change):
    from safetensors.numpy import load_file, save_file
    sd = {k: v.astype(np.float32) for k, v in load_file(str(FIX / "siglip.safetensors")).items()}
    change(sd)
    p = tmp_path / f"{name}.safetensors"
    save_file({k: v.astype(np.float16) for k, v in sd.items()}, str(p))
    return p


def trained_like(tmp_path):
    """The siglip checkpoint made to behave as trained weights do where these faults
    show: on timm's random init attention is uniform (logits' std ~0.03: a scale or a q/k
    swap changes nothing), the latent is small beside the q bias, and GELU's inputs sit
    where its erf and tanh forms agree to ~10⁻⁴. Here q and k are ×12 (logits' std ~2,
    as trained attention), proj ×10, the latent ×30 and the pool's q weight ×4, and
    fc1's bias -3 with fc2 ×30 (the MLP branch reads GELU's negative tail, where the two
    forms differ by ~10 %)."""
    def change(sd):
        D = sd["pos_embed"].shape[-1]
        for i in range(2):
            sd[f"blocks.{i}.attn.qkv.weight"][:2 * D] *= 12
            sd[f"blocks.{i}.attn.proj.weight"] *= 10
            sd[f"blocks.{i}.mlp.fc1.bias"] -= 3
            sd[f"blocks.{i}.mlp.fc2.weight"] *= 30
        sd["attn_pool.latent"] *= 30
        sd["attn_pool.q.weight"] *= 4
    return _checkpoint(tmp_path, "trained_like", change)


def small_tokens(tmp_path):
    """The siglip checkpoint with the patch embedding and positions ×10⁻³: the first
    LayerNorm's inputs then have a variance near 10⁻⁵, where its eps matters (on tokens
    of variance ~1 it changes them by ~10⁻⁶, below any f16 model)."""
    def change(sd):
        for k in ("patch_embed.proj.weight", "patch_embed.proj.bias", "pos_embed"):
            sd[k] *= 1e-3
    return _checkpoint(tmp_path, "small_tokens", change)


def trial(model):
    return compile_trial(dict(model=model, target=target_cfg("tiny"), policy={}))["run"]


@pytest.mark.parametrize("fault", list(FAULTS))
def test_planted_wrong_model_fails_validation(fault, monkeypatch, tmp_path):
    model = fixture_model("siglip", input="photo:astronaut")
    model["weights"] = str((small_tokens if fault == "eps" else trained_like)(tmp_path))
    clean = trial(model)
    assert clean.validated and clean.model["ok"], clean.model
    build = MODELS["vit"]

    def planted(cfg):
        g, data = build(cfg)
        FAULTS[fault](g, data)
        return g, data
    monkeypatch.setitem(MODELS, "vit", planted)
    r = trial(model)
    assert not r.validated
    assert not r.model["ok"] and r.model["failed"].startswith("model:"), r.model
    assert r.model["rms_rel_error"] > 3 * clean.model["rms_rel_error"]
    # the per-op check sees nothing: the device does what the (wrong) graph says
    assert r.readback["ops_checked"] > 0 and r.readback["ops_failed"] == 0
    assert json.dumps(r.metrics())          # the figures are plain data for metrics/run.json
    # metrics/trial.json's headline says why, in one line
    from types import SimpleNamespace

    from compiler.report import headline
    h = headline(None, SimpleNamespace(metrics=lambda: {}), r)
    assert h["status"] == "invalid" and h["invalid"] == r.model["failed"]
    assert h["model_rms_rel_error"] == r.model["rms_rel_error"]


@pytest.mark.parametrize("photo", ["astronaut", "coins", "rocket"])
@pytest.mark.parametrize("tower", list(TOWERS))
def test_trials_on_photos_match_the_model(tower, photo):
    r = trial(fixture_model(tower, input=f"photo:{photo}"))
    assert r.validated and r.model["ok"], r.model
    assert r.model["rms_rel_error"] <= 2e-3 and r.model["cosine"] >= 0.99999
    m = r.metrics()
    assert m["model_rms_rel_error"] == r.model["rms_rel_error"] and m["model_cosine"] == r.model["cosine"]


def test_model_bytes_same_on_a_generic_cpu(tmp_path):
    """The independent model's outputs (stored by the reference phase) are the same bytes
    when numba compiles for a generic x86-64 (no AVX, no FMA) in a fresh process."""
    import hashlib
    import subprocess
    import sys
    code = ("import hashlib, numpy as np\n"
            "from compiler.phases import model_phase\n"
            "from compiler.model_check import model_outputs\n"
            f"m = model_phase(dict(model={fixture_model('siglip', input='photo:astronaut')!r}))\n"
            "o = model_outputs(m.graph, m.data)\n"
            "print(hashlib.sha256(b''.join(o[k].tobytes() for k in sorted(o))).hexdigest())\n")
    env = {"NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin",
           "PYTHONHASHSEED": "7"}
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    m = model_phase(dict(model=fixture_model("siglip", input="photo:astronaut")))
    o = model_check.model_outputs(m.graph, m.data)
    assert r.stdout.strip() == hashlib.sha256(b"".join(o[k].tobytes() for k in sorted(o))).hexdigest()


# --- the model check's parts: the weights held against their source, the FP8 budget -------

@pytest.mark.parametrize("fp8", [False, True])
def test_weights_held_are_checked_against_their_source(fp8):
    """The independent model runs on the device's weights, so a weight the builder never
    loads (zero on the device) passes it; the weights check holds them to their source
    (the seeded tensors) and fails exactly the tensor changed, in both activation modes."""
    m = model_phase(dict(model=dict(TOWERS["siglip"], fp8_activations=fp8)))
    clean = model_check.weights_check(m.graph, m.data)
    assert 0 < clean["rms_rel_error"] <= clean["bound"], clean          # FP8 / f16 weight rounding only
    for name in ("attn_pool.latent", "pos_embed"):
        data = dict(m.data, **{name: np.zeros_like(m.data[name])})
        w = model_check.weights_check(m.graph, data)
        assert w["worst"] == name and w["rms_rel_error"] == 1.0, w
        assert not model_check.check(m.graph, {}, w)["ok"]


@pytest.mark.parametrize("key", ["fp8_budget_embedding", "fp8_budget_features"])
@pytest.mark.parametrize("value", [0, -0.1, "3%", True])
def test_fp8_budget_must_be_a_positive_number(key, value):
    from compiler.policy import Policy
    from compiler.target import ConfigError
    with pytest.raises(ConfigError, match=f"policy.{key}"):
        Policy.from_dict({key: value})


def test_headline_names_every_failed_check():
    """metrics/trial.json's `invalid` is run.failed: the FP8 budget's line too, not only the model's."""
    from types import SimpleNamespace

    from compiler.report import headline
    line = "end to end; fp8 accuracy: ... embedding rms 0.99 > 0.03"
    run = SimpleNamespace(validated=False, failed=line, model={}, metrics=lambda: {})
    h = headline(None, SimpleNamespace(metrics=lambda: {}), run)
    assert h["status"] == "invalid" and h["invalid"] == line


def test_the_checks_figures_match_exact_sums():
    """model_check sums in one fixed compiled order (exact.fsum64), not math.fsum: its rms and
    cosine stay within 1e-12 of the exactly rounded figures, and the same input gives the
    same bits reversed in memory (a fixed order, not the layout's)."""
    import math
    rng = np.random.default_rng(7)
    want = rng.standard_normal(200_003) * np.exp(rng.uniform(-20, 20, 200_003))
    got = want * (1 + 1e-3 * rng.standard_normal(want.size))
    rms = math.sqrt(math.fsum(((got - want) ** 2).tolist()) / math.fsum((want * want).tolist()))
    cos = math.fsum((got * want).tolist()) / math.sqrt(math.fsum((got * got).tolist())
                                                       * math.fsum((want * want).tolist()))
    assert model_check._rms_rel(got, want) == pytest.approx(rms, rel=1e-12)
    assert model_check._cosine(got, want) == pytest.approx(cos, rel=1e-12)
    assert model_check._rms_rel(got[::-1].copy()[::-1], want) == model_check._rms_rel(got, want)
    assert model_check._rms_rel(np.array([1.0, np.nan]), np.ones(2)) == math.inf

"""The whole ViT tower (image -> embedding / logits) on the tiny target: ops before
and after the encoder Repeat compile, run on the simulator and validate against the
numpy reference; cycles measured = cycles predicted with the body counted `count`
times and the rest once. Model input and weight import: images through Pillow
(grey-scale and RGBA converted to RGB), preprocessed arrays, and one-line errors
naming the file or tensor."""
import numpy as np
import pytest

from compiler.models import vit, vit_config, vit_weights, weights
from compiler.phases import compile_trial, model_phase, reference_phase
from compiler.target import ConfigError
from helpers import target_cfg

SIGLIP = dict(name="vit", preset="custom", width=64, hidden=172, heads=2, image=56, patch=14, layers=2, gelu="erf")
B16 = dict(name="vit", preset="custom", width=64, hidden=256, heads=2, image=64, patch=16, layers=2, pool="token",
           classes=12, gelu="erf")


def trial(model):
    return compile_trial(dict(model=model, target=target_cfg("tiny"), policy={}))


@pytest.mark.parametrize("model", [SIGLIP, B16], ids=["siglip", "b16"])
def test_tower_validates(model):
    r = trial(model)
    assert r["report"].summary["status"] == "ok", r["run"].metrics()
    assert r["run"].validated
    tg = r["place"].tilegraph
    runs = tg.step_runs()
    b0, b1 = tg.body_steps()
    assert 0 < b0 < b1 < len(tg.steps)                       # steps before and after the body
    # the simulator's steps: before, body × count (in order), after
    sim = r["run"].cycles_per_step
    body = [int(c) for c in tg.analysis["step_cycles"][b0:b1]]
    assert sim == [int(c) for c in tg.analysis["step_cycles"][:b0]] + body * tg.count + \
        [int(c) for c in tg.analysis["step_cycles"][b1:]]
    assert r["run"].cycles == tg.analysis["cycles"] == int((tg.analysis["step_cycles"] * runs).sum())
    outs = set(r["reference"].outputs)
    assert outs == ({"features", "logits"} if model.get("pool") == "token" else {"features", "embedding"})


def test_tower_graph_shapes():
    g, data = vit.build(dict(SIGLIP))
    assert g.tensors["pixels"].shape == (16, 3 * 14 * 14) and g.tensors["embedding"].shape == (1, 64)
    first, stop = g.body()
    assert g.ops[first - 1].outputs == ("x",) and g.ops[stop].inputs[0] == "y"
    g, data = vit.build(dict(B16))
    assert g.tensors["pixels"].shape == (18, 3 * 16 * 16)      # class token row + 16 patches + padding
    assert not data["pixels"][0].any() and not data["pixels"][17].any()
    assert g.tensors["logits"].shape == (1, 12)


def test_so400m_preset_dims():
    c = vit_config.VitConfig(preset="so400m", scope="tower")
    d = c.dims()
    assert d["tokens"] == 729 and d["image"] == 384 and d["patch"] == 14       # 384 = 27·14 + 6
    assert vit_config.VitConfig(preset="b16").dims()["tokens"] == 197


def _weights(tmp_path, model, drop=None, extra=None, fmt="npz"):
    c = vit_config.VitConfig(**model)
    d = c.dims()
    shapes = vit_weights.block_shapes(c.layers, d["width"], d["hidden"]) | vit_weights.tower_shapes(d, c.classes)
    w = vit_weights.seeded_weights(np.random.default_rng(3), 0, 0, 0, shapes).state_dict()
    if drop:
        w.pop(drop)
    w |= extra or {}
    p = tmp_path / f"w.{fmt}"
    if fmt == "npz":
        np.savez(p, **w)
    else:
        from safetensors.numpy import save_file
        save_file(w, str(p))
    return str(p)


@pytest.mark.parametrize("fmt", ["npz", "safetensors"])
def test_weights_import_and_ignored_tensors(tmp_path, fmt):
    p = _weights(tmp_path, SIGLIP, extra={"head.weight": np.zeros((4, 64), np.float32)}, fmt=fmt)
    m = model_phase(dict(model=dict(SIGLIP, weights=p)))
    assert m.metrics()["ignored_tensors"] == ["head.weight"]
    w = weights.read_tensors(p)
    got = m.data["patch_embed.proj.weight"].astype(np.float64) * m.graph.tensors["patch_embed.proj.weight"].scale
    np.testing.assert_allclose(got, w["patch_embed.proj.weight"].reshape(64, -1).T, rtol=0.07, atol=1e-3)


@pytest.mark.parametrize("drop,bad,match", [
    ("pos_embed", None, "missing tensor pos_embed"),
    ("attn_pool.kv.bias", None, "missing tensor attn_pool.kv.bias"),
    (None, "patch_embed.proj.weight", "patch_embed.proj.weight has shape")])
def test_bad_weights_name_the_tensor(tmp_path, drop, bad, match):
    extra = {bad: np.zeros((3, 3), np.float32)} if bad else None
    p = _weights(tmp_path, SIGLIP, drop=drop, extra=extra)
    with pytest.raises(ConfigError, match=match):
        model_phase(dict(model=dict(SIGLIP, weights=p)))


def _png(tmp_path, mode, size=(70, 60)):
    from PIL import Image
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (size[1], size[0], 4), dtype=np.uint8)
    img = Image.fromarray(a, "RGBA").convert(mode)
    p = tmp_path / f"img_{mode}.png"
    img.save(p)
    return str(p), img


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_image_input_converted_to_rgb(tmp_path, mode):
    from PIL import Image
    p, img = _png(tmp_path, mode)
    m = model_phase(dict(model=dict(SIGLIP, input=p)))
    # independently: shorter side (60) to 56 bicubic -> 65x56, center crop 56, [-1, 1]
    rgb = img.convert("RGB").resize((65, 56), Image.BICUBIC).crop((4, 0, 60, 56))
    x = np.asarray(rgb, np.float32).transpose(2, 0, 1) / 127.5 - 1
    patch0 = x[:, :14, :14].reshape(-1)
    np.testing.assert_allclose(m.data["pixels"][0].astype(np.float32), patch0, atol=1e-3)
    if mode == "L":
        assert np.array_equal(x[0], x[1])


def test_pixel_array_input(tmp_path):
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 56, 56)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    m = model_phase(dict(model=dict(SIGLIP, input=str(tmp_path / "x.npy"))))
    np.testing.assert_allclose(m.data["pixels"][1].astype(np.float32), x[0, :, :14, 14:28].reshape(-1), atol=1e-3)


def test_bad_inputs_name_the_file(tmp_path):
    p, _ = _png(tmp_path, "RGB")
    data = open(p, "rb").read()
    trunc = tmp_path / "trunc.png"
    trunc.write_bytes(data[:len(data) // 2])
    with pytest.raises(ConfigError, match="trunc.png: unreadable image"):
        model_phase(dict(model=dict(SIGLIP, input=str(trunc))))
    np.save(tmp_path / "bad.npy", np.zeros((3, 50, 50), np.float32))
    with pytest.raises(ConfigError, match=r"bad.npy: pixel array of shape \(3, 50, 50\)"):
        model_phase(dict(model=dict(SIGLIP, input=str(tmp_path / "bad.npy"))))
    with pytest.raises(ConfigError, match="nope.png: no such file"):
        model_phase(dict(model=dict(SIGLIP, input=str(tmp_path / "nope.png"))))


def test_b16_preprocessing_resizes_then_crops(tmp_path):
    """b16 (crop_pct 0.9): the shorter side to ⌊224/0.9⌋ = 248, then the center 224²."""
    from PIL import Image
    from compiler.models.image import load_image
    p, img = _png(tmp_path, "RGB", size=(300, 260))
    x = load_image(p, 224, 0.9, (0.5,) * 3, (0.5,) * 3)
    ref = img.resize((286, 248), Image.BICUBIC).crop((31, 12, 255, 236))   # 300·248/260 = 286.15
    np.testing.assert_allclose(x, np.asarray(ref, np.float32).transpose(2, 0, 1) / 127.5 - 1, atol=1e-5)


def test_corrupt_weights_file_names_it(tmp_path):
    p = tmp_path / "w.safetensors"
    p.write_bytes(b"\x10\x00\x00\x00not a header")
    with pytest.raises(ConfigError, match="w.safetensors: unreadable"):
        model_phase(dict(model=dict(SIGLIP, weights=str(p))))


@pytest.mark.parametrize("model", [SIGLIP, B16], ids=["siglip", "b16"])
def test_batch_of_images(tmp_path, model):
    """Two images as a list: each image's output is what it gets alone, and the batch
    compiles and validates."""
    p1, _ = _png(tmp_path, "RGB")
    p2, _ = _png(tmp_path, "L")
    head = "logits" if model.get("pool") == "token" else "embedding"
    both = reference_phase(model_phase(dict(model=dict(model, input=[p1, p2], batch=2)))).outputs[head]
    for b, p in enumerate((p1, p2)):
        alone = reference_phase(model_phase(dict(model=dict(model, input=p)))).outputs[head]
        # every matmul's sums are exact, rounded once (compiler/exact.py): a row's bits do not
        # depend on how many rows share the product
        assert both[b].tobytes() == alone[0].tobytes()
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, model["image"], model["image"])).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = trial(dict(model, input=str(tmp_path / "x.npy"), batch=2))
    assert r["run"].validated and r["reference"].outputs[head].shape[0] == 2
    with pytest.raises(ConfigError, match="model.input lists 2 files, model.batch=3"):
        model_phase(dict(model=dict(model, input=[p1, p2], batch=3)))

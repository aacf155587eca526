"""Build the committed timm fixture (tests/fixtures/timm/, <= 1 MB):

    python experiments/timm_check/make_fixture.py [--numpy | --refresh-fp8]

Two tiny towers shaped like the presets: `siglip` (vit_so400m_patch14_siglip_384's
architecture: patch 14, a 56 × 56 image, width 64, 2 heads, depth 2, MLP 172, no class
token, MAP attention-pool head) and `b16` (vit_base_patch16_224's: patch 16, 64 × 64,
width 64, 2 heads, depth 2, MLP 256, class token, a 12-class head). Random init, then
biases, norms, class token and positions perturbed so that none is trivial. Written:
<tower>.safetensors (timm's state dict in float16, timm's names), image.png (70 × 60
RGB: both towers resize and crop it), and outputs.npz: per tower the preprocessed
pixels, the outputs in float64 on the float16 weights (`fp32` -- the float16 values,
upcast) and on Tessera's FP8-rounded weights (`fp8`, dequantized back under timm's
names), and `source`: "timm <version>" when torch and timm are installed
(`pip install -e '.[timm]'`), else "numpy_timm" (experiments/timm_check/numpy_timm.py,
an independent re-implementation of timm's forward). --numpy forces the latter."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import numpy_timm  # noqa: E402

from compiler.models import vit, vit_config, vit_weights  # noqa: E402
from compiler.models.gemm import dequantize  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "timm"
TOWERS = {
    "siglip": dict(timm="vit_so400m_patch14_siglip_384", heads=2, depth=2, pool="map", crop_pct=1.0, size=56,
                   kwargs=dict(img_size=56, patch_size=14, embed_dim=64, depth=2, num_heads=2, mlp_ratio=172 / 64,
                               class_token=False, global_pool="map", num_classes=0),
                   tessera=dict(name="vit", preset="custom", scope="tower", width=64, hidden=172, heads=2,
                                image=56, patch=14, layers=2, pool="map", gelu="erf")),
    "b16": dict(timm="vit_base_patch16_224", heads=2, depth=2, pool="token", crop_pct=1.0, size=64,
                kwargs=dict(img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=2, mlp_ratio=4.0,
                            num_classes=12),
                tessera=dict(name="vit", preset="custom", scope="tower", width=64, hidden=256, heads=2,
                             image=64, patch=16, layers=2, pool="token", classes=12, gelu="erf")),
}


def perturb(sd: dict, rng) -> dict:
    out = {}
    for k, v in sd.items():
        v = np.asarray(v, np.float32)
        if k.endswith("norm.weight") or k.endswith("norm1.weight") or k.endswith("norm2.weight"):
            v = 1 + 0.1 * rng.standard_normal(v.shape)
        elif k.endswith("bias"):
            v = v + 0.1 * rng.standard_normal(v.shape)
        elif k in ("cls_token", "pos_embed"):
            v = v + 0.02 * rng.standard_normal(v.shape)
        out[k] = v.astype(np.float16)
    return out


def timm_state(spec, rng):
    """(state dict, forward(sd, pixels) -> outputs, source) from timm, or None."""
    try:
        import timm
        import torch
    except ImportError:
        return None
    torch.manual_seed(int(rng.integers(1 << 31)))
    model = timm.create_model(spec["timm"], pretrained=False, **spec["kwargs"]).eval()
    sd = perturb({k: v.numpy() for k, v in model.state_dict().items()}, rng)

    def forward(w, pixels):
        model.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in w.items()})
        with torch.no_grad():
            x = torch.from_numpy(pixels[None].astype(np.float32))
            feats = model.forward_features(x)
            head = model.forward_head(feats)
        key = "logits" if spec["pool"] == "token" else "embedding"
        return {"features": feats[0].double().numpy(), key: head.double().numpy()}
    return sd, forward, f"timm {timm.__version__}"


def numpy_state(spec, rng):
    c = vit_config.VitConfig(**spec["tessera"])
    d = c.dims()
    shapes = vit_weights.block_shapes(c.layers, d["width"], d["hidden"]) | vit_weights.tower_shapes(d, c.classes)
    sd = perturb(vit_weights.seeded_weights(rng, 0, 0, 0, shapes).state_dict(), rng)

    def forward(w, pixels):
        return numpy_timm.forward(w, pixels, spec["heads"], spec["depth"], spec["pool"])
    return sd, forward, "numpy_timm"


def fp8_rounded(spec, path: Path, sd: dict) -> dict:
    """The weights as Tessera stores them: every FP8 tensor dequantized, under timm's names."""
    g, data = vit.build(dict(spec["tessera"], weights=str(path)))
    seq = set(g.repeat.sequences)
    out = {k: np.asarray(v, np.float64) for k, v in sd.items()}
    for name, t in g.tensors.items():
        if t.kind != "param" or t.dtype != "fp8":
            continue
        val = dequantize(data[name], t.scale)      # a sequence: one scale per layer
        if name in seq:
            for i in range(len(val)):
                out[f"blocks.{i}.{name}"] = val[i].T
        else:
            out[name] = val.T.reshape(out[name].shape)
    return out


def image(path: Path):
    """A 70 × 60 RGB image: smooth gradients plus noise (compresses, yet every pixel differs)."""
    from PIL import Image
    rng = np.random.default_rng(11)
    yy, xx = np.mgrid[0:60, 0:70]
    a = np.stack([xx * 3.5, yy * 4.0, (xx + yy) * 2.0], -1) + rng.normal(0, 12, (60, 70, 3))
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB").save(path, optimize=True)


def refresh_fp8():
    """Recompute only the `fp8` outputs (after a change to how Tessera rounds weights)
    from the committed weights, with numpy_timm, once numpy_timm is checked to give the
    committed `fp32` outputs (timm's, if timm made them) within 1e-5 rms."""
    from safetensors.numpy import load_file
    with np.load(OUT / "outputs.npz", allow_pickle=False) as z:
        outs = {k: z[k] for k in z.files}
    for name, spec in TOWERS.items():
        path = OUT / f"{name}.safetensors"
        sd = load_file(str(path))
        fwd = lambda w: numpy_timm.forward(w, outs[f"{name}/pixels"].astype(np.float64), spec["heads"],
                                           spec["depth"], spec["pool"])
        for k, v in fwd({k: np.asarray(v, np.float64) for k, v in sd.items()}).items():
            ref = outs[f"{name}/fp32/{k}"].astype(np.float64)
            rms = float(np.sqrt(((np.asarray(v) - ref) ** 2).mean() / (ref ** 2).mean()))
            assert rms < 1e-5, (name, k, rms)
        for k, v in fwd(fp8_rounded(spec, path, sd)).items():
            outs[f"{name}/fp8/{k}"] = np.asarray(v, np.float32)
        src = str(outs[f"{name}/source"]).split("; ")[0]
        outs[f"{name}/source"] = np.array(f"{src}; fp8 outputs: numpy_timm (equal to the fp32 outputs' source "
                                          f"within 1e-5 rms)")
        print(f"{name}: fp8 outputs refreshed ({outs[f'{name}/source']})")
    np.savez_compressed(OUT / "outputs.npz", **outs)


def main(argv):
    if "--refresh-fp8" in argv:
        return refresh_fp8()
    from safetensors.numpy import save_file
    OUT.mkdir(parents=True, exist_ok=True)
    image(OUT / "image.png")
    rng = np.random.default_rng(2026)
    outs = {}
    for name, spec in TOWERS.items():
        got = None if "--numpy" in argv else timm_state(spec, rng)
        sd, forward, source = got or numpy_state(spec, rng)
        path = OUT / f"{name}.safetensors"
        save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, str(path))
        pixels = numpy_timm.preprocess(str(OUT / "image.png"), spec["size"], spec["crop_pct"])
        outs[f"{name}/pixels"] = pixels.astype(np.float32)
        for tag, w in (("fp32", {k: np.asarray(v, np.float64) for k, v in sd.items()}),
                       ("fp8", fp8_rounded(spec, path, sd))):
            for k, v in forward(w, pixels).items():
                outs[f"{name}/{tag}/{k}"] = np.asarray(v, np.float32)
        outs[f"{name}/source"] = np.array(source)
        print(f"{name}: {source}, {path.stat().st_size} B of weights")
    np.savez_compressed(OUT / "outputs.npz", **outs)
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"fixture: {total} B in {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])

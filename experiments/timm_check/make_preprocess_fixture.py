"""Build the committed preprocessing fixture (tests/fixtures/timm/preprocess/, with
../outputs.npz and the towers well under 1 MB): image files in several formats and the
pixel arrays timm's eval transform makes of them, for tests/test_timm_preprocess.py.

    PYTHONPATH=<site with torch, timm> python experiments/timm_check/make_preprocess_fixture.py

Needs torch and timm (never CI): `pip install --target /tmp/t torch timm` keeps them out of
the project's venv. Written: the images (made once from scikit-image's bundled photos:
a JPEG 640 × 480, a grey-scale PNG 300 × 517, an RGBA PNG, a palette PNG) and pixels.npz:
per case its source (a file here or photo:NAME), size, crop_pct, interpolation, mean, std
and timm's [3, S, S] float32 pixels (timm.data.create_transform(..., is_training=False),
on the image as timm's loader opens it: PIL convert("RGB")); and `presets`: the
pretrained cfgs timm resolves for the two preset models (resolve_data_config), JSON."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from compiler.models import photos  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "timm" / "preprocess"
INCEPTION, IMAGENET = ((0.5,) * 3, (0.5,) * 3), ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# (name, source, size, crop_pct, interpolation, (mean, std))
CASES = [
    ("astronaut_b16", "photo:astronaut", 224, 0.9, "bicubic", INCEPTION),     # b16's preset, full size
    ("jpeg_640x480", "rgb_640x480.jpg", 64, 0.9, "bicubic", INCEPTION),
    ("grey_300x517", "grey_300x517.png", 56, 1.0, "bicubic", INCEPTION),
    ("rgba_160x120", "rgba_160x120.png", 64, 0.875, "bilinear", IMAGENET),
    ("palette_97x61", "palette_97x61.png", 56, 0.9, "nearest", INCEPTION),
    ("camera_grey", "photo:camera", 56, 0.9, "bicubic", INCEPTION),
    ("coins_odd", "photo:coins", 70, 0.95, "bicubic", INCEPTION),
]
PRESET_MODELS = {"so400m": "vit_so400m_patch14_siglip_384", "b16": "vit_base_patch16_224"}


def images():
    from PIL import Image
    chelsea, camera, astro = (photos.load(f"photo:{n}") for n in ("chelsea", "camera", "astronaut"))
    chelsea.resize((640, 480), Image.Resampling.LANCZOS).save(OUT / "rgb_640x480.jpg", quality=85)
    camera.resize((300, 517), Image.Resampling.LANCZOS).save(OUT / "grey_300x517.png", optimize=True)
    rgba = astro.resize((160, 120), Image.Resampling.LANCZOS).convert("RGBA")
    alpha = np.tile(np.linspace(40, 255, 160, dtype=np.uint8), (120, 1))
    rgba.putalpha(Image.fromarray(alpha, "L"))
    rgba.save(OUT / "rgba_160x120.png", optimize=True)
    astro.resize((97, 61), Image.Resampling.LANCZOS).quantize(64).save(OUT / "palette_97x61.png", optimize=True)


def main():
    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_data_config
    OUT.mkdir(parents=True, exist_ok=True)
    images()
    out = {}
    for name, src, size, crop, interp, (mean, std) in CASES:
        img = photos.load(src) if photos.is_photo(src) else Image.open(OUT / src)
        tf = create_transform(input_size=(3, size, size), is_training=False, interpolation=interp, mean=mean,
                              std=std, crop_pct=crop, crop_mode="center")
        with torch.no_grad():
            px = tf(img.convert("RGB")).numpy()
        out[f"{name}/pixels"] = px.astype(np.float32)
        out[f"{name}/spec"] = np.array(json.dumps(dict(source=src, size=size, crop_pct=crop, interpolation=interp,
                                                       mean=mean, std=std)))
    presets = {}
    for p, model in PRESET_MODELS.items():
        cfg = resolve_data_config({}, model=timm.create_model(model, pretrained=False, depth=1))
        presets[p] = dict(model=model, tag=timm.create_model(model, pretrained=False, depth=1).pretrained_cfg["tag"],
                          **{k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()})
    out["presets"] = np.array(json.dumps(presets, sort_keys=True))
    out["source"] = np.array(f"timm {timm.__version__}, torch {torch.__version__}")
    np.savez_compressed(OUT / "pixels.npz", **out)
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{out['source']}: {len(CASES)} cases, {total} B in {OUT.relative_to(ROOT)}")
    print(json.dumps(presets, indent=1))


if __name__ == "__main__":
    main()

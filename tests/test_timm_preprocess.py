"""Tessera's image preprocessing against the pixel arrays timm made of the same images
(tests/fixtures/timm/preprocess/, built by experiments/timm_check/make_preprocess_fixture.py
with timm's create_transform): a JPEG, grey-scale, RGBA and palette PNGs of odd sizes, and
bundled photos (photo:NAME), under several crop_pct, interpolations and mean/std; and the
presets' preprocessing against the pretrained cfgs timm resolves for the two models."""
import json

import numpy as np
import pytest

from compiler.models import vit_config
from compiler.models.image import load_pixels
from compiler.target import ConfigError
from conftest import REPO

FIX = REPO / "tests" / "fixtures" / "timm" / "preprocess"
Z = np.load(FIX / "pixels.npz", allow_pickle=False)
CASES = sorted({k.split("/")[0] for k in Z.files if k.endswith("/pixels")})


def test_fixture_made_by_timm():
    assert str(Z["source"]).startswith("timm "), str(Z["source"])
    assert len(CASES) >= 6


@pytest.mark.parametrize("case", CASES)
def test_pixels_equal_timms(case):
    spec = json.loads(str(Z[f"{case}/spec"]))
    src = spec["source"] if spec["source"].startswith("photo:") else str(FIX / spec["source"])
    got = load_pixels(src, spec["size"], spec["crop_pct"], spec["mean"], spec["std"], None, spec["interpolation"])
    want = Z[f"{case}/pixels"]
    assert got.shape == want.shape and got.dtype == np.float32
    # the same PIL resize and float32 arithmetic as torchvision: equal to the last bit or nearly
    assert float(np.abs(got - want).max()) <= 1e-6, (case, float(np.abs(got - want).max()))


@pytest.mark.parametrize("preset", ["so400m", "b16"])
def test_presets_are_timms_pretrained_cfgs(preset):
    t = json.loads(str(Z["presets"]))[preset]
    d = vit_config.VitConfig(preset=preset, scope="tower").dims()
    assert (d["image"], d["crop_pct"], d["interpolation"]) == (t["input_size"][1], t["crop_pct"], t["interpolation"])
    assert list(d["mean"]) == t["mean"] and list(d["std"]) == t["std"]


def test_wrong_crop_changes_pixels():
    """The fixture can fail: the so400m preset's old crop_pct (1.0) is not timm's."""
    spec = json.loads(str(Z["astronaut_b16/spec"]))
    got = load_pixels("photo:astronaut", 224, 1.0, spec["mean"], spec["std"], None, "bicubic")
    assert float(np.abs(got - Z["astronaut_b16/pixels"]).max()) > 0.1


@pytest.mark.parametrize("key,value", [("crop_pct", 1.5), ("crop_pct", -0.1), ("interpolation", "lanczos"),
                                       ("mean", [0.5, 0.5]), ("std", [0.5, 0.0, 0.5]), ("mean", "0.5")])
def test_bad_preprocessing_key_named(key, value):
    from pipeline.config import check_model
    with pytest.raises(ConfigError, match=f"model.{key}"):
        check_model(dict(name="vit", preset="so400m", scope="tower", **{key: value}), "test")


def test_keys_override_the_preset():
    d = vit_config.VitConfig(preset="so400m", scope="tower", crop_pct=1.0, interpolation="bilinear", mean=[0, 0, 0],
                      std=[1, 1, 1]).dims()
    assert (d["crop_pct"], d["interpolation"], list(d["mean"]), list(d["std"])) == (1.0, "bilinear", [0, 0, 0],
                                                                                   [1, 1, 1])

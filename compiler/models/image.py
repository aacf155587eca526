"""Model input: an image file, a bundled photo (`photo:NAME`, models/photos.py) or
preprocessed pixels, as patch rows.

An image (PNG/JPEG, through Pillow) is converted to RGB (grey-scale, palette and RGBA
alike, as timm's loader does: PIL `convert("RGB")`) and preprocessed as timm's eval
transform for the preset (its pretrained cfg's crop_pct, interpolation, mean, std; the
model.crop_pct / interpolation / mean / std keys override them): resize the shorter side
to floor(size / crop_pct) with that interpolation, center crop size × size, scale to
[0, 1], normalise by mean and std (timm.data.transforms_factory
transforms_imagenet_eval, torchvision Resize/CenterCrop/ToTensor/Normalize on PIL
images, float32 as torchvision computes them).
An .npy/.npz holds pixels already preprocessed, [3, S, S] or [1, 3, S, S] (an .npz
its array `pixels` or `pixel_values`, its only array, or its only float array of that shape).

The patch embedding is a matmul over patch rows: the host sends the pixels rearranged,
row p = patch p (row-major over the patch grid) flattened in the order of timm's conv
weight [D, 3, P, P] (channel, then row, then column)."""
from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from ..target import ConfigError
from . import photos

MEAN = STD = (0.5, 0.5, 0.5)   # both presets' pretrained cfgs (timm: so400m siglip, b16 augreg)
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")     # timm's names; PIL's filters of the same name


def check_preprocess(crop_pct, interpolation, mean, std) -> None:
    """The preprocessing keys (0 / "" / [] = the preset's); ValueError names the key."""
    if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not 0 <= crop_pct <= 1:
        raise ValueError(f"model.crop_pct={crop_pct!r}: must be in (0, 1] (0 = the preset's)")
    if interpolation not in ("", *INTERPOLATIONS):
        raise ValueError(f"model.interpolation={interpolation!r}: not one of {', '.join(INTERPOLATIONS)} "
                         f"(\"\" = the preset's)")
    for key, v in (("mean", mean), ("std", std)):
        ok = isinstance(v, (list, tuple)) and len(v) in (0, 3) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        if not ok or (key == "std" and any(x <= 0 for x in v)):
            raise ValueError(f"model.{key}={v!r}: must be [] (the preset's) or three numbers"
                             f"{', each > 0' if key == 'std' else ''}")


def _eval_transform(img, size: int, crop_pct: float, interpolation: str = "bicubic"):
    from PIL import Image
    scale = math.floor(size / crop_pct)
    w, h = img.size
    if w <= h:              # torchvision Resize(int): the shorter side to `scale`
        ow, oh = scale, int(scale * h / w)
    else:
        oh, ow = scale, int(scale * w / h)
    img = img.resize((ow, oh), getattr(Image.Resampling, interpolation.upper()))
    top, left = int(round((oh - size) / 2.0)), int(round((ow - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def load_image(path: str, size: int, crop_pct: float, mean, std, interpolation: str = "bicubic") -> np.ndarray:
    """float32 [3, size, size], preprocessed (`path`: a file or `photo:NAME`)."""
    from PIL import Image, UnidentifiedImageError
    try:
        if photos.is_photo(path):
            img = photos.load(path).convert("RGB")
        else:
            with Image.open(path) as im:
                im.load()
                img = im.convert("RGB")
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
        raise ConfigError(f"model.input={path}: unreadable image ({type(e).__name__}: {str(e)[:100]})") from None
    x = np.asarray(_eval_transform(img, size, crop_pct, interpolation), np.float32) / np.float32(255.0)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


PIXEL_KEYS = ("pixels", "pixel_values")     # ours; Hugging Face image processors' (e.g. SigLIP's)


def _pixel_key(z, path: str, size: int, batch: int) -> str:
    """The array of an .npz that holds the pixels: `pixels` or `pixel_values`, else the
    only array, else the only float array of the input's shape (an exporter's file may hold
    more: labels, ids); anything else names what the file holds."""
    for k in PIXEL_KEYS:
        if k in z.files:
            return k
    if len(z.files) == 1:
        return z.files[0]
    shapes = {k: z[k].shape for k in z.files}   # small arrays: the file is one input
    want = {(batch, 3, size, size)} | ({(3, size, size)} if batch == 1 else set())
    fits = [k for k, s in shapes.items() if tuple(s) in want and np.issubdtype(z[k].dtype, np.floating)]
    if len(fits) == 1:
        return fits[0]
    held = ", ".join(f"{k} {tuple(s)}" for k, s in shapes.items())
    raise ConfigError(f"model.input={path}: none of its arrays ({held}) is named {' or '.join(PIXEL_KEYS)}, and "
                      f"{len(fits) or 'none'} {'is' if len(fits) == 1 else 'are'} float [{batch}, 3, {size}, {size}]")


def load_array(path: str, size: int, batch: int = 1) -> np.ndarray:
    """[batch, 3, size, size] (a [3, size, size] array is one image)."""
    p = Path(path)
    try:
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                a = z[_pixel_key(z, path, size, batch)]
        else:
            a = np.load(p, allow_pickle=False)
    except ConfigError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ConfigError(f"model.input={path}: unreadable array ({type(e).__name__}: {str(e)[:100]})") from None
    shape = tuple(a.shape)
    if len(shape) == 3:
        a = a[None]
    if tuple(a.shape) != (batch, 3, size, size) or not np.issubdtype(a.dtype, np.floating):
        one = f"[3, {size}, {size}] or " if batch == 1 else ""
        raise ConfigError(f"model.input={path}: pixel array of shape {shape} ({a.dtype}), expected float "
                          f"{one}[{batch}, 3, {size}, {size}] (model.batch={batch})")
    return np.asarray(a, np.float32)


def load_pixels(path: str, size: int, crop_pct: float, mean, std, rng, interpolation: str = "bicubic") -> np.ndarray:
    """[3, size, size] float32: the file's pixels, or seeded ones ("": uniform in the
    normalised range of a real image, [-1, 1] for mean = std = 0.5)."""
    if not path:
        lo, hi = (0 - np.asarray(mean)) / np.asarray(std), (1 - np.asarray(mean)) / np.asarray(std)
        u = rng.random((3, size, size), dtype=np.float32)
        return (lo[:, None, None] + u * (hi - lo)[:, None, None]).astype(np.float32)
    if photos.is_photo(path):
        return load_image(path, size, crop_pct, mean, std, interpolation)
    if not Path(path).is_file():
        raise ConfigError(f"model.input={path}: no such file")
    if Path(path).suffix in (".npy", ".npz"):
        return load_array(path, size)[0]
    return load_image(path, size, crop_pct, mean, std, interpolation)


def load_batch(inp, batch: int, size: int, crop_pct: float, mean, std, rng,
               interpolation: str = "bicubic") -> list[np.ndarray]:
    """`batch` images [3, size, size]: seeded (""), one per file (or photo) of a list, or
    the images of one file (an image, or a pixel array [batch, 3, S, S])."""
    if isinstance(inp, (list, tuple)):
        if len(inp) != batch:
            raise ConfigError(f"model.input lists {len(inp)} files, model.batch={batch}")
        return [load_pixels(str(p), size, crop_pct, mean, std, rng, interpolation) for p in inp]
    if not inp:
        return [load_pixels("", size, crop_pct, mean, std, rng) for _ in range(batch)]
    if Path(inp).suffix in (".npy", ".npz") and Path(inp).is_file():
        return list(load_array(inp, size, batch))
    if batch != 1:
        raise ConfigError(f"model.input={inp}: one image, model.batch={batch} (give a list of files)")
    return [load_pixels(inp, size, crop_pct, mean, std, rng, interpolation)]


def patch_rows(pixels: np.ndarray, patch: int) -> np.ndarray:
    """[3, S, S] -> [n², 3·P·P], n = ⌊S/P⌋: patch (i, j) at row i·n + j, flattened
    (c, y, x). A stride-P convolution drops the last S mod P pixels (So400m: 384 = 27·14 + 6)."""
    c, s, _ = pixels.shape
    n = s // patch
    return pixels[:, :n * patch, :n * patch].reshape(c, n, patch, n, patch).transpose(1, 3, 0, 2, 4).reshape(n * n, c * patch * patch)

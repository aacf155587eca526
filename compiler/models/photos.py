"""Real photos: the ones scikit-image ships inside its wheel (`skimage.data`, read offline).

A model input written `photo:NAME` (e.g. `model.input=photo:astronaut`) is one of them. They
are split once, here, into the photos FP8 calibration may look at and the photos it never
sees (the held-out set every FP8 accuracy figure is measured on; the default trial's input
is one of them). Never move a photo from HELD_OUT to CALIBRATION without a new held-out set:
a figure measured on the photos it was tuned on says nothing.

Each is returned as Pillow would open its file (RGB, grey-scale "L" or RGBA), so the eval
transform treats it exactly as an image file of the same pixels (compiler/models/image.py)."""
from __future__ import annotations

import numpy as np

PREFIX = "photo:"

# colour, grey-scale and RGBA photos of several sizes and aspect ratios, in each set
CALIBRATION = ("coffee", "chelsea", "hubble_deep_field", "camera", "brick", "gravel")
HELD_OUT = ("astronaut", "rocket", "immunohistochemistry", "retina", "coins", "moon", "clock", "logo")
DEFAULT = "astronaut"      # the default trial's input: held out, never calibrated on
ALL = CALIBRATION + HELD_OUT
# `model.input=photo:held_out`: the batch's images are the first model.batch held-out photos
# (in HELD_OUT's order, repeated past 8), so one sweep over model.batch needs no list per point
HELD_OUT_SET = PREFIX + "held_out"


def is_photo(spec) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def held_out(batch: int) -> list:
    """The first `batch` held-out photos as `photo:NAME` specs (repeated past len(HELD_OUT))."""
    return [PREFIX + HELD_OUT[i % len(HELD_OUT)] for i in range(batch)]


def expand(spec, batch: int):
    """model.input as the model reads it: `photo:held_out` becomes held_out(batch); any other
    spec is returned as given."""
    ok = isinstance(batch, int) and not isinstance(batch, bool) and batch > 0   # else model.batch's own error
    return held_out(batch) if spec == HELD_OUT_SET and ok else spec


def name_of(spec: str) -> str:
    return spec[len(PREFIX):]


def load(spec: str):
    """`photo:NAME` (or NAME) -> a PIL image of that bundled photo. ValueError names the
    photos there are."""
    from PIL import Image
    name = name_of(spec) if is_photo(spec) else spec
    if name not in ALL:
        raise ValueError(f"{PREFIX}{name}: not a bundled photo (one of {', '.join(ALL)})")
    import skimage.data
    a = np.ascontiguousarray(getattr(skimage.data, name)())
    if a.dtype != np.uint8:
        a = (a > 0).astype(np.uint8) * 255 if a.dtype == bool else a.astype(np.uint8)
    return Image.fromarray(a)

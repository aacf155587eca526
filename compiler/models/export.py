"""The ViT tower's claim "these are the weights I run", named the timm way: a timm state
dict made from the model's data (what the host streams to the device), which the
independent model (compiler/timm_model.py) runs to check the graph (compiler/model_check.py).

Every value is the device's: FP8 weights dequantized with their per-layer scales, f16
ones as stored, after any host-side folding (models/centering.py's offsets in the
LayerNorm and matmul biases; they keep the function unchanged, which is what the check
then tests). Linear weights go back from the device's in×out to timm's out×in (as transposed
views: the memory stays in×out, the layout the independent model's matmul reads), the patch
matmul's [3·P·P, D] to the conv's [D, 3, P, P], sequence member i to blocks.{i}.

The class token (pool=token): the host sends a zero pixel row for it, so its token on
the device is the patch bias plus the position table's row 0 (which the model phase
loaded with cls_token + pos_embed[0] - bias). Exported as timm computes that token,
cls_token + pos_embed[0]: cls_token = the stored patch bias, pos_embed[0] = the stored
row 0. A wrong fold there is caught by the fixture test (tests/test_timm_model.py), which
runs this export against timm's outputs on the checkpoint itself.

The mapping is lazy (a Mapping computing each tensor when read): 27 So400m layers in
float64 would be ~3 GB, one layer is ~120 MB."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..numba_probe import njit

META = "timm"        # g.meta[META]: the architecture from the config (never from the graph's ops)


def arch_meta(c, d: dict) -> dict:
    """What the independent model needs of the config (VitConfig `c`, its dims `d`)."""
    return dict(preset=c.preset, heads=d["heads"], depth=c.layers, pool=d["pool"], gelu=c.gelu, eps=float(c.eps),
                patch=d["patch"],
                image=d["image"], tokens=d["tokens"], width=d["width"], batch=c.batch,
                fp8_activations=bool(c.fp8_activations),
                # where the weights come from (the model check holds the device's to them)
                hidden=d["hidden"], classes=c.classes, seed=c.seed, weights=c.weights)


class TimmState(Mapping):
    """timm name -> float64 array, read from the model's data on access."""

    def __init__(self, g, data: dict):
        self.g, self.data, self.arch = g, data, g.meta[META]
        seq = set(g.repeat.sequences) if g.repeat else set()
        a = self.arch
        self.names: dict[str, tuple] = {}          # timm name -> (data name, member, how)
        for name in sorted(g.tensors):
            t = g.tensors[name]
            if t.kind != "param" or name not in data:
                continue
            if name in seq:
                for i in range(a["depth"]):
                    self.names[f"blocks.{i}.{name}"] = (name, i, _how(name, t.shape))
            elif name == "pos_embed":
                self.names["pos_embed"] = (name, None, "pos")
            elif name == "patch_embed.proj.weight":
                self.names[name] = (name, None, "conv")
            elif name == "attn_pool.latent":
                self.names[name] = (name, None, "token")
            else:
                self.names[name] = (name, None, _how(name, t.shape))
        if a["pool"] == "token":
            self.names["cls_token"] = ("patch_embed.proj.bias", None, "token")

    def __getitem__(self, key):
        name, i, how = self.names[key]
        t = self.g.tensors[name]
        raw = np.asarray(self.data[name] if i is None else self.data[name][i])
        scale = t.scale[i] if isinstance(t.scale, tuple) else (t.scale or 1.0)
        if raw.dtype.itemsize == 1:       # FP8: code x scale from a 256-entry table of the same products
            tab = np.arange(256, dtype=np.uint8).view(raw.dtype).astype(np.float64) * float(scale)
            v = np.empty(raw.shape)
            _decode(np.ascontiguousarray(raw).view(np.uint8).reshape(-1), tab, v.reshape(-1))
        else:
            v = raw.astype(np.float64) * float(scale)
        a = self.arch
        if how == "T":        # timm's out x in as a view of the device's in x out: timm_model.linear
            return v.T        # multiplies by its transpose, so no copy is made either way
        if how == "vec":
            return v.ravel()
        if how == "conv":
            P = a["patch"]
            return np.ascontiguousarray(v.T).reshape(-1, 3, P, P)
        if how == "token":
            return v.reshape(1, 1, -1)
        if how == "pos":      # image 0's rows (one copy per image on the host), real tokens only
            return v[:a["tokens"]][None]
        raise AssertionError(how)

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)


@njit(nogil=True, cache=True)
def _decode(codes, table, out):
    """out[i] = table[codes[i]]: the values np.take gives, in 1.1 ns an element against its 4.4
    (0.4 G FP8 weights at 27 So400m layers, read by the forward and again by the weights check).
    The reference's reference_ops._lookup is the same loop, written again on purpose: the
    export feeds the independent model, which shares no code with the graph it checks."""
    for i in range(codes.shape[0]):
        out[i] = table[codes[i]]


def _how(name: str, shape: tuple) -> str:
    """Linear weights back to out×in; biases and norms ([1, n] on the device) to vectors."""
    return "T" if name.endswith(".weight") and shape[0] > 1 else "vec"


def image_pixels(g, data: dict, b: int) -> np.ndarray:
    """Image b as the device received it: its patch rows (f16) put back in place,
    [3, n·P, n·P] (the pixels a stride-P convolution reads)."""
    a = g.meta[META]
    P, n = a["patch"], a["image"] // a["patch"]
    T = g.tensors["pixels"].shape[0] // a["batch"]
    first = b * T + int(a["pool"] == "token")
    rows = np.asarray(data["pixels"][first:first + n * n], np.float64)
    return rows.reshape(n, n, 3, P, P).transpose(2, 0, 3, 1, 4).reshape(3, n * P, n * P)

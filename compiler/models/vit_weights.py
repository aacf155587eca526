"""The ViT's weights by timm's names: the names and shapes of a block's tensors and of the
tower's (patch embedding, positions, final norm, head), loading them from a file, and seeding
them (lazily, per tensor, from the seed and the name). Separate from vit.py (the graph
builders), which maps these names to graph tensors, because the independent model
(model_check.py), the config stage's input checks (precheck.py) and the fixtures read the
same names and shapes without building a graph."""
from __future__ import annotations

import numpy as np

from .weights import SeededWeights, read_tensors, take, uniform


def timm_shapes(i: int, D: int, F: int) -> dict:
    """timm names and shapes (Linear weights out×in) of block i."""
    b = f"blocks.{i}."
    return {b + "norm1.weight": (D,), b + "norm1.bias": (D,), b + "attn.qkv.weight": (3 * D, D),
            b + "attn.qkv.bias": (3 * D,), b + "attn.proj.weight": (D, D), b + "attn.proj.bias": (D,),
            b + "norm2.weight": (D,), b + "norm2.bias": (D,), b + "mlp.fc1.weight": (F, D),
            b + "mlp.fc1.bias": (F,), b + "mlp.fc2.weight": (D, F), b + "mlp.fc2.bias": (D,)}


def tower_shapes(d: dict, classes: int) -> dict:
    """timm names and shapes of the tensors outside the blocks (patch embedding,
    positions, final norm, and the head: attn_pool.* for pool=map, cls_token and head.*
    for pool=token)."""
    D, F, P, T0 = d["width"], d["hidden"], d["patch"], d["tokens"]
    s = {"patch_embed.proj.weight": (D, 3, P, P), "patch_embed.proj.bias": (D,), "pos_embed": (1, T0, D),
         "norm.weight": (D,), "norm.bias": (D,)}
    if d["pool"] == "token":
        s |= {"cls_token": (1, 1, D), "head.weight": (classes, D), "head.bias": (classes,)}
    else:
        a = "attn_pool."
        s |= {a + "latent": (1, 1, D), a + "q.weight": (D, D), a + "q.bias": (D,), a + "kv.weight": (2 * D, D),
              a + "kv.bias": (2 * D,), a + "proj.weight": (D, D), a + "proj.bias": (D,), a + "norm.weight": (D,),
              a + "norm.bias": (D,), a + "mlp.fc1.weight": (F, D), a + "mlp.fc1.bias": (F,),
              a + "mlp.fc2.weight": (D, F), a + "mlp.fc2.bias": (D,)}
    return s


def load_weights(path: str, shapes: dict) -> tuple[dict, list[str]]:
    """The tensors of `shapes` from the file, and the names of those left unused."""
    return take(read_tensors(path), shapes, path)


def block_shapes(layers: int, D: int, F: int) -> dict:
    return {k: v for i in range(layers) for k, v in timm_shapes(i, D, F).items()}


def seeded_weights(seed, layers: int, D: int, F: int, shapes: dict | None = None) -> SeededWeights:
    """Seeded tensors under timm's names, made lazily per tensor from (seed, name) (weights.py):
    27 So400m layers' float32 would be 1.7 GB, one tensor is at most 20 MB. `seed`: an int,
    or a Generator (one integer is drawn from it). Norm weights 1 + 0.1·N, biases 0.1·N,
    positions, class token and latent 0.02·N; Linear weights uniform on ±g·√(3/fan_in) (the
    variance of N(0, g²/fan_in); uniform as torch's default Linear init, and ~10x cheaper to
    draw) with a per-tensor gain g = 2^U(-½, ½): trained layers differ in magnitude, and
    without it every layer's uniform draw would reach the same amax, so per-layer FP8 scales
    would all be equal and a scale read from the wrong layer harmless. Made in in×out order and returned as the out×in view (param() transposes them
    back for free); the patch convolution N(0, 1/fan_in), fan_in = 3·P·P."""
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(1 << 62))
    return SeededWeights(seed, block_shapes(layers, D, F) if shapes is None else shapes, _seed_tensor)


def _seed_tensor(rng, name: str, shape: tuple) -> np.ndarray:
    if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name.endswith("norm.weight"):
        return 1 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
    if name.endswith("bias"):
        return 0.1 * rng.standard_normal(shape, dtype=np.float32)
    if name in ("pos_embed", "cls_token", "attn_pool.latent"):
        return 0.02 * rng.standard_normal(shape, dtype=np.float32)
    fan_in = int(np.prod(shape[1:]))
    if len(shape) == 2:
        gain = 2.0 ** rng.uniform(-0.5, 0.5)
        return uniform(rng, shape[::-1], float(gain * np.sqrt(3 / fan_in))).T
    return rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(fan_in))


_BLOCK_PARAMS = {k.split(".", 2)[2] for k in timm_shapes(0, 4, 4)}

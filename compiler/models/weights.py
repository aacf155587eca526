"""Checkpoint import: tensors under timm's names from an .npz or .safetensors file,
each checked against the shape the model needs. A missing or mis-shaped tensor is an
error naming it; tensors the model does not use are returned (never dropped silently:
they reach metrics/model.json as model.ignored_tensors)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..target import ConfigError


def check_path(path: str) -> Path:
    """The checkpoint file, which must exist and be .npz or .safetensors."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"model.weights={path}: no such file")
    if p.suffix not in (".npz", ".safetensors"):
        raise ConfigError(f"model.weights={path}: expected a .npz or .safetensors file")
    return p


def read_tensors(path: str) -> dict:
    p = check_path(path)
    try:
        if p.suffix == ".safetensors":
            from safetensors.numpy import load_file
            return load_file(str(p))
        with np.load(p, allow_pickle=False) as z:         # .npz
            return {k: z[k] for k in z.files}
    except Exception as e:   # any decoder's error (OSError, BadZipFile, SafetensorError, ...) names the file
        raise ConfigError(f"model.weights={path}: unreadable ({type(e).__name__}: {str(e)[:120]})") from None


def take(raw: dict, shapes: dict, path: str) -> tuple[dict, list[str]]:
    """float32 copies of the tensors named in `shapes` (a timm name -> shape), and the
    sorted names of the file's other tensors. float32 holds fp16/bf16/fp32 exactly."""
    out = {}
    for name, shape in shapes.items():
        if name not in raw:
            raise ConfigError(f"{path}: missing tensor {name} (shape {tuple(shape)})")
        a = raw[name]
        if tuple(a.shape) != tuple(shape):
            raise ConfigError(f"{path}: tensor {name} has shape {tuple(a.shape)}, expected {tuple(shape)}")
        out[name] = np.asarray(a, np.float32)
    return out, sorted(set(raw) - set(shapes))

"""Checks of a model's inputs that run before any stage writes (pipeline/config.py calls
them from `validate()`), each cheap, each failing with one ConfigError line:

  * `host_bytes(cfg)`: a lower estimate of the host memory the model and reference phases
    hold, from the model's dimensions alone (parameters as stored, the activations the
    reference keeps, attention scores, the preprocessed image), for the caller to hold
    against the memory the machine has. Lower: it counts only what those phases certainly
    hold (the So400m tower at 27 layers: 0.45 GB here, 1.3 GiB peak RSS measured), so it
    refuses only what cannot run.
  * `check_weights(cfg)`: a checkpoint's tensor names, shapes and dtypes from its headers
    (a .safetensors file's JSON header; an .npz's zip directory and .npy headers), never
    its data: a missing, mis-shaped or non-float tensor, blocks missing for `model.layers`
    or left over beyond it, a truncated file.
  * `check_input(cfg)`: the model input decoded as the model phase will decode it (an image
    through Pillow, a pixel array, a bundled photo), so a missing, truncated or non-image
    file fails here. Only after `host_bytes`: a huge `model.image` would make the decode
    itself the allocation.

File map: sizes; host_bytes (one estimate per model); weights headers (npz, safetensors);
check_weights; check_input."""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np

from ..target import ConfigError

FLOAT_ST = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}          # safetensors dtypes a model may hold
ST_SIZES = FLOAT_ST | {"F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1, "I16": 2, "U16": 2,
                       "I32": 4, "U32": 4, "I64": 8, "U64": 8}
MAX_ST_HEADER = 100 << 20        # safetensors' own limit on the JSON header


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return ""


# ---- host memory --------------------------------------------------------------------------

def host_bytes(cfg: dict) -> tuple[str, dict]:
    """(the keys that set the size, as `model.k=v, ...`; {part: bytes}) for model `cfg`
    (already checked by models.check). F32 = 4 B: the reference evaluates in float32, twice
    (f16-rounded and not) on two threads, so its activations count twice."""
    from . import attention, config_class
    from .config import model_config
    name = cfg["name"]
    if name == "vit":
        c = model_config(config_class(name), dict(cfg))
        d = c.dims()
        D, F, H = d["width"], d["hidden"], d["heads"]
        T = attention.padded(d["tokens"], c.token_align)
        B = c.batch if c.tower else 1
        L, wb = c.layers, (1 if c.weight_dtype == "fp8" else 2)
        params = L * (D * (4 * D + 2 * F) * wb + (9 * D + F) * 2)
        keys = [("layers", L), ("width", D), ("hidden", F)]
        parts = {"parameters": params}
        if c.tower:
            P, S = d["patch"], d["image"]
            parts["parameters"] += D * 3 * P * P * wb + B * T * D * 2
            parts["image"] = B * (3 * S * S * 4 + T * 3 * P * P * 2)
            keys += [("image", S), ("patch", P), ("batch", B)]
        else:
            keys += [("tokens", d["tokens"])]
        parts["activations"] = 2 * B * T * (4 * D + F) * 4
        parts["attention scores"] = B * H * T * T * 4
    elif name == "gemm":
        c = model_config(config_class(name), dict(cfg))
        wb = 1 if c.dtype == "fp8" else 2
        keys = [("m", c.m), ("k", c.k), ("n", c.n)]
        parts = {"operands": (c.m * c.k + c.k * c.n) * wb, "activations": 2 * c.m * c.n * 4}
    elif name == "mlp":
        c = model_config(config_class(name), dict(cfg))
        R = c.tokens * c.batch
        keys = [("tokens", c.tokens), ("batch", c.batch), ("width", c.width), ("hidden", c.hidden),
                ("repeat", c.repeat)]
        # seeded in float64 (rng.standard_normal), all members at once
        parts = {"parameters": c.repeat * 2 * c.width * c.hidden * 8,
                 "activations": 2 * R * (c.width + c.hidden) * 4}
    else:       # attention, flash_attention
        c = model_config(config_class(name), dict(cfg))
        T = attention.padded(c.tokens)
        keys = [("tokens", c.tokens), ("heads", c.heads), ("head_dim", c.head_dim)]
        parts = {"activations": 2 * 4 * T * c.heads * c.head_dim * 4}
        if name == "attention":
            parts["attention scores"] = c.heads * T * T * 4
    return ", ".join(f"model.{k}={v}" for k, v in keys), parts


# ---- checkpoint headers ---------------------------------------------------------------------

def _npy_header(f) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, header bytes) of an .npy stream, reading its header only."""
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(f)
    return tuple(shape), dtype, f.tell()


def npz_headers(path: str) -> dict:
    """{array name: (shape, dtype)} of an .npz from its zip directory and .npy headers;
    a member whose data is shorter or longer than its header says is an error."""
    out = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            with z.open(info) as f:
                try:
                    shape, dtype, head = _npy_header(f)
                except ValueError as e:
                    raise ConfigError(f"{path}: member {info.filename} is not an .npy array ({e})") from None
            if dtype.hasobject:
                raise ConfigError(f"{path}: array {name} holds Python objects (refused: loading it needs pickle)")
            want = head + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if info.file_size != want:
                raise ConfigError(f"{path}: array {name} {shape} {dtype} has {info.file_size - head} bytes of data, "
                                  f"expected {want - head} (truncated or corrupt)")
            out[name] = (shape, dtype)
    return out


def safetensors_headers(path: str) -> dict:
    """{tensor name: (shape, dtype name)} from a .safetensors file's JSON header; offsets
    checked against the file's size (a truncated file fails here)."""
    size = Path(path).stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < n <= min(MAX_ST_HEADER, size - 8):
            raise ConfigError(f"{path}: not a safetensors file (header length {n}, file {size} B)")
        try:
            meta = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{path}: not a safetensors file (header: {e})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: not a safetensors file (header is not a JSON object)")
    out, end = {}, 0
    for name, t in meta.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = t["dtype"], tuple(int(s) for s in t["shape"]), t["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise ConfigError(f"{path}: tensor {name}: malformed header entry {str(t)[:80]}") from None
        if dtype in ST_SIZES and e - b != int(np.prod(shape, dtype=np.int64)) * ST_SIZES[dtype]:
            raise ConfigError(f"{path}: tensor {name} {shape} {dtype}: its data is {e - b} B, expected "
                              f"{int(np.prod(shape)) * ST_SIZES[dtype]}")
        out[name], end = (shape, dtype), max(end, int(e))
    if 8 + n + end != size:
        raise ConfigError(f"{path}: the header describes {8 + n + end} B, the file has {size} B (truncated or corrupt)")
    return out


def _blocks(names) -> set[int]:
    return {int(m.group(1)) for n in names if (m := re.match(r"blocks\.(\d+)\.", n))}


def _span(ix) -> str:
    ix = sorted(ix)
    return str(ix[0]) if len(ix) == 1 else f"{ix[0]}-{ix[-1]}" if ix == list(range(ix[0], ix[-1] + 1)) \
        else ", ".join(map(str, ix[:8])) + (" ..." if len(ix) > 8 else "")


def check_weights(cfg: dict) -> None:
    """A ViT's `model.weights` against the tensors the preset, scope and depth need, from
    the file's headers: every needed tensor present, of its shape and a float dtype; no
    block beyond `model.layers` (a 4-layer file under model.layers=3 would silently run
    three); other extra tensors are allowed (the model phase lists them as
    model.ignored_tensors)."""
    from .config import model_config
    from .vit_config import VitConfig
    from .vit_weights import block_shapes, tower_shapes
    from .weights import check_path
    c = model_config(VitConfig, dict(cfg))
    if not c.weights:
        return
    path = str(check_path(c.weights))
    where = f"model.weights={c.weights}"
    try:
        if path.endswith(".safetensors"):
            heads = {k: (s, d, d in FLOAT_ST) for k, (s, d) in safetensors_headers(path).items()}
        else:
            heads = {k: (s, str(d), d.kind == "f") for k, (s, d) in npz_headers(path).items()}
    except ConfigError as e:
        raise ConfigError(f"model.weights={e}") from None
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
        raise ConfigError(f"{where}: unreadable ({type(e).__name__}: {str(e)[:120]})") from None
    d = c.dims()
    need = block_shapes(c.layers, d["width"], d["hidden"]) | (tower_shapes(d, c.classes) if c.tower else {})
    have = _blocks(heads)
    extra = sorted(i for i in have if i >= c.layers)
    if extra:
        raise ConfigError(f"{where}: holds blocks {_span(have)} ({len(have)} layers), model.layers={c.layers} "
                          f"would leave block{'s' * (len(extra) > 1)} {_span(extra)} unused "
                          f"(set model.layers={max(have) + 1})")
    missing_blocks = sorted(i for i in range(c.layers) if i not in have)
    if missing_blocks:
        held = f"holds blocks {_span(have)} ({len(have)} layers)" if have else "holds no encoder blocks"
        raise ConfigError(f"{where}: {held}, model.layers={c.layers} needs blocks 0-{c.layers - 1}: "
                          f"block{'s' * (len(missing_blocks) > 1)} {_span(missing_blocks)} missing")
    for name, shape in need.items():
        if name not in heads:
            raise ConfigError(f"{where}: missing tensor {name} (shape {tuple(shape)})")
        got, dtype, is_float = heads[name]
        if tuple(got) != tuple(shape):
            raise ConfigError(f"{where}: tensor {name} has shape {tuple(got)}, expected {tuple(shape)}")
        if not is_float:
            raise ConfigError(f"{where}: tensor {name} is {dtype}, expected a float type")


# ---- the input ------------------------------------------------------------------------------

def check_input(cfg: dict) -> None:
    """A ViT tower's `model.input` decoded as the model phase decodes it: each image file
    through Pillow and timm's eval transform, a pixel array read and its shape checked, a
    `photo:NAME` looked up among the bundled photos."""
    from . import photos
    from .config import model_config
    from .image import MEAN, STD, load_batch
    from .vit_config import VitConfig
    c = model_config(VitConfig, dict(cfg))
    if not c.tower or not c.input:
        return
    d = c.dims()
    specs = c.input if isinstance(c.input, (list, tuple)) else [c.input]
    if not isinstance(c.input, (list, tuple)) and photos.is_photo(c.input) and c.batch != 1:
        raise ConfigError(f"model.input={c.input}: one image, model.batch={c.batch} (give a list)")
    for s in specs:
        if photos.is_photo(s):
            try:
                photos.load(s)
            except ValueError as e:
                raise ConfigError(f"model.input={e}") from None
    files = [s for s in specs if not photos.is_photo(s)]
    if isinstance(c.input, (list, tuple)):
        if len(c.input) != c.batch:
            raise ConfigError(f"model.input lists {len(c.input)} files, model.batch={c.batch}")
        for s in files:
            load_batch([str(s)], 1, d["image"], d.get("crop_pct", 1.0), MEAN, STD, None)
    elif files:
        load_batch(str(c.input), c.batch, d["image"], d.get("crop_pct", 1.0), MEAN, STD, None)

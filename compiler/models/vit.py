"""ViT encoder: `layers` pre-norm blocks, as one Repeat whose per-layer weights are
sequences (LayerNorm, QKV, attention, projection,
residual, LayerNorm, fc1, GELU, fc2, residual). Presets: so400m (1152 wide, 27 deep,
MLP 4304, 16 heads, 729 tokens), b16 (768/12/3072/12, 197 tokens). Weights FP8 e4m3
with per-tensor scales (or f16), activations and partials FP16.

Weights are seeded, or imported from an .npz / .safetensors file with timm's names
(blocks.{i}.attn.qkv.weight, ...; Linear weights stored out×in, transposed here).
An odd token count is padded by one masked token (see attention.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..ir import Graph, Repeat, Tensor
from ..target import ConfigError
from .attention import attention_ops, padded
from .config import check_positive, model_config
from .gemm import FP8_MAX, quantize

PRESETS = {"so400m": dict(width=1152, layers=27, hidden=4304, heads=16, tokens=729),
           "b16": dict(width=768, layers=12, hidden=3072, heads=12, tokens=197)}


@dataclass(frozen=True)
class VitConfig:
    name: str = "vit"
    preset: str = "so400m"        # so400m | b16 | custom (then width..tokens below are used)
    layers: int = 4
    width: int = 0                # 0: from the preset
    hidden: int = 0
    heads: int = 0
    tokens: int = 0
    weight_dtype: str = "fp8"
    gelu: str = "tanh"
    eps: float = 1e-6
    weights: str = ""             # .npz or .safetensors with timm names; "" = seeded
    fp8_activations: bool = False  # cast the inputs of QKV, proj, fc1, fc2 to FP8 (bounded scales)
    seed: int = 0

    def dims(self) -> dict:
        d = dict(PRESETS.get(self.preset, {}))
        d.pop("layers", None)
        for k in ("width", "hidden", "heads", "tokens"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        return d

    def check(self):
        if self.preset not in (*PRESETS, "custom"):
            raise ValueError(f"model.preset={self.preset!r}: not one of {', '.join(PRESETS)}, custom")
        check_positive(self, "layers")
        d = self.dims()
        for k in ("width", "hidden", "heads", "tokens"):
            if not isinstance(d.get(k), int) or d[k] <= 0:
                raise ValueError(f"model.{k}={d.get(k)!r}: must be a positive integer (preset custom)")
        if d["width"] % d["heads"] or (d["width"] // d["heads"]) % 2:
            raise ValueError(f"model.width={d['width']} must split into model.heads={d['heads']} "
                             f"heads of an even size")
        for k in ("width", "hidden"):
            if d[k] % 4:
                raise ValueError(f"model.{k}={d[k]}: must be a multiple of 4 (FP8 rows move as words)")
        if self.weight_dtype not in ("f16", "fp8") or self.gelu not in ("tanh", "erf"):
            raise ValueError(f"model.weight_dtype={self.weight_dtype!r} / model.gelu={self.gelu!r}: "
                             f"expected f16|fp8 and tanh|erf")


def timm_shapes(i: int, D: int, F: int) -> dict:
    """timm names and shapes (Linear weights out×in) of block i."""
    b = f"blocks.{i}."
    return {b + "norm1.weight": (D,), b + "norm1.bias": (D,), b + "attn.qkv.weight": (3 * D, D),
            b + "attn.qkv.bias": (3 * D,), b + "attn.proj.weight": (D, D), b + "attn.proj.bias": (D,),
            b + "norm2.weight": (D,), b + "norm2.bias": (D,), b + "mlp.fc1.weight": (F, D),
            b + "mlp.fc1.bias": (F,), b + "mlp.fc2.weight": (D, F), b + "mlp.fc2.bias": (D,)}


def load_weights(path: str, layers: int, D: int, F: int) -> dict:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"model.weights={path}: no such file")
    if p.suffix == ".safetensors":
        from safetensors.numpy import load_file
        raw = load_file(str(p))
    elif p.suffix == ".npz":
        raw = dict(np.load(p))
    else:
        raise ConfigError(f"model.weights={path}: expected a .npz or .safetensors file")
    out = {}
    for i in range(layers):
        for name, shape in timm_shapes(i, D, F).items():
            if name not in raw:
                raise ConfigError(f"{path}: missing tensor {name} (shape {shape})")
            if tuple(raw[name].shape) != shape:
                raise ConfigError(f"{path}: tensor {name} has shape {tuple(raw[name].shape)}, expected {shape}")
            out[name] = np.asarray(raw[name], np.float32)   # float32 is exact for fp16/bf16/fp32 files
    return out


def seeded_weights(rng, layers: int, D: int, F: int) -> dict:
    """float32: 27 layers of So400m weights are 1.7 GB even so (quantized once, then freed)."""
    w = {}
    for i in range(layers):
        for name, shape in timm_shapes(i, D, F).items():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight"):
                w[name] = 1 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
            elif name.endswith("bias"):
                w[name] = 0.1 * rng.standard_normal(shape, dtype=np.float32)
            else:
                w[name] = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[1]))
    return w


def build(cfg: dict):
    c = model_config(VitConfig, cfg)
    d = c.dims()
    D, F, H, T0 = d["width"], d["hidden"], d["heads"], d["tokens"]
    T, hd = padded(T0), D // H
    rng = np.random.default_rng(c.seed)
    w = load_weights(c.weights, c.layers, D, F) if c.weights else seeded_weights(rng, c.layers, D, F)
    g = Graph(f"vit_{c.preset}_L{c.layers}_{c.weight_dtype}")
    data = {"x": np.zeros((T, D), np.float16)}
    data["x"][:T0] = rng.standard_normal((T0, D))
    g.add(Tensor("x", (T, D), "f16", "input"))
    L = c.layers

    def param(name, shape, dtype, transpose=False):
        """A sequence: member i is block i's tensor (Linear weights as in×out)."""
        arr = np.stack([w[f"blocks.{i}.{name}"].T if transpose else w[f"blocks.{i}.{name}"]
                        for i in range(L)]).reshape(L, *shape)
        stored, scale = quantize(arr, dtype)
        g.add(Tensor(name, shape, dtype, "param", scale))
        data[name] = stored
        return name

    def act(name, cols):
        return g.add(Tensor(name, (T, cols), "f16", "act")).name

    def linear(xin, wname, y, k, n):
        """x·W + b (timm Linear: W stored out×in, b in f16)."""
        g.op("matmul", [xin, param(wname, (k, n), c.weight_dtype, True)], [act(y + ".xw", n)], m=T, k=k, n=n)
        bname = wname.replace(".weight", ".bias")
        g.op("bias", [y + ".xw", param(bname, (1, n), "f16")], [act(y, n)])
        return y

    def value(name):
        """[L, ...] float64 values of a parameter sequence as the device stores them."""
        return data[name].astype(np.float64) * g.tensors[name].scale

    def fp8(y, bound):
        """Cast y to FP8 with the scale of `bound()` [L, cols], a bound on |y| for any input
        x; one scale for all layers (a cast's scale is an immediate of the Repeat body).
        The cast saturates, so the bound needs only be tight, not exact (f16 rounding)."""
        if not c.fp8_activations:
            return y, 0.0
        b = bound()
        scale = float(b.max()) / FP8_MAX
        g.add(Tensor(y + ".fp8", (T, b.shape[-1]), "fp8", "act", scale))
        g.op("cast", [y], [y + ".fp8"], scale=scale)
        return y + ".fp8", scale

    def norm(xin, which, y):
        g.op("layernorm", [xin, param(f"{which}.weight", (1, D), "f16"), param(f"{which}.bias", (1, D), "f16")],
             [act(y, D)], eps=c.eps)
        # LayerNorm(x) = γ⊙z + β with Σz² <= D, so |z_j| <= √(D-1)
        gam, bet = (value(f"{which}.{k}")[:, 0] for k in ("weight", "bias"))
        return fp8(y, lambda: np.abs(gam) * np.sqrt(D - 1) + np.abs(bet))

    def after_norm(which, cast_scale, wname, cols=slice(None)):
        """A bound [L, cols] on |LayerNorm(x)·W + b| for any x, tighter than Σ|x||W| by
        Cauchy-Schwarz: |z·(γ⊙W_j)| <= √D·‖γ⊙W_j‖₂, and β·W_j + b_j is known. If the
        LayerNorm output was cast to FP8, each x_i errs by <= 2^-4|x_i| + scale·2^-10."""
        gam, bet = (value(f"{which}.{k}")[:, 0] for k in ("weight", "bias"))
        w, b = value(wname)[..., cols], value(wname.replace(".weight", ".bias"))[:, 0, cols]
        aw = np.abs(w)
        zterm = np.sqrt(D) * np.sqrt(np.einsum("li,lij->lj", gam ** 2, w ** 2))
        err = 2.0 ** -4 * (zterm + np.einsum("li,lij->lj", np.abs(bet), aw)) + cast_scale * 2.0 ** -10 * aw.sum(1)
        return zterm + np.abs(np.einsum("li,lij->lj", bet, w) + b) + (err if cast_scale else 0)

    # one encoder block: the Repeat body, every parameter a sequence over the layers
    h, s1 = norm("x", "norm1", "ln1")
    qkv = linear(h, "attn.qkv.weight", "qkv", D, 3 * D)
    attention_ops(g, qkv, qkv, qkv, act("attn", D), T, H, hd, valid=T0, cols=(0, D, 2 * D))
    # attention rows are convex combinations of V's rows: |attn_j| <= max |V_j|
    a, _ = fp8("attn", lambda: after_norm("norm1", s1, "attn.qkv.weight", slice(2 * D, 3 * D)))
    linear(a, "attn.proj.weight", "proj", D, D)
    g.op("add", ["x", "proj"], [act("res1", D)])
    h2, s2 = norm("res1", "norm2", "ln2")
    linear(h2, "mlp.fc1.weight", "fc1", D, F)
    g.op("gelu", ["fc1"], [act("gelu", F)], approx=c.gelu)
    # |gelu(x)| <= |x| for x >= 0 and < 0.17 for x < 0 (tanh and erf forms alike)
    u, _ = fp8("gelu", lambda: np.maximum(after_norm("norm2", s2, "mlp.fc1.weight"), 0.17))
    linear(u, "mlp.fc2.weight", "fc2", F, D)
    g.tensors["y"] = Tensor("y", (T, D), "f16", "output")
    g.op("add", ["res1", "fc2"], ["y"])
    seqs = tuple(n for n, t in g.tensors.items() if t.kind == "param")
    g.repeat = Repeat(L, (("y", "x"),), seqs)
    return g, data

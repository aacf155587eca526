"""An independent float64 numpy re-implementation of timm's VisionTransformer forward
(timm/models/vision_transformer.py, timm/layers/attention_pool.py) and of its eval
preprocessing, for the towers Tessera models. It shares no code with compiler/: it
works on timm's state-dict names and layouts directly ([N, C] tokens, conv weights
[D, 3, P, P], Linear weights out×in), and is what the fixture falls back on when
torch/timm are not installed (the fixture's `source` says which produced it).

Semantics followed (timm): PatchEmbed = Conv2d(3, D, P, stride P, bias) then flatten
(row-major over the patch grid); class token prepended before pos_embed is added
(no_embed_class=False); Block: x + proj(attn(norm1(x))), x + fc2(gelu(fc1(norm2(x))));
qkv out features ordered (3, heads, head_dim); scale head_dim**-0.5; LayerNorm eps
1e-6; GELU exact (erf); final norm; pool 'map': AttentionPoolLatent (q from the
latent, kv split (2, heads, head_dim), proj, x + mlp(norm(x)), token 0); pool
'token': x[:, 0] then head."""
from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def preprocess(path: str, size: int, crop_pct: float, mean=(0.5,) * 3, std=(0.5,) * 3) -> np.ndarray:
    """timm create_transform(is_training=False): Resize(floor(size/crop_pct), bicubic)
    on the shorter side, CenterCrop(size), ToTensor, Normalize. [3, size, size]."""
    from PIL import Image
    img = Image.open(path).convert("RGB")
    s = math.floor(size / crop_pct)
    w, h = img.size
    ow, oh = (s, int(s * h / w)) if w <= h else (int(s * w / h), s)
    img = img.resize((ow, oh), Image.BICUBIC)
    top, left = int(round((oh - size) / 2)), int(round((ow - size) / 2))
    img = img.crop((left, top, left + size, top + size))
    x = np.asarray(img, np.float64).transpose(2, 0, 1) / 255.0
    return (x - np.asarray(mean)[:, None, None]) / np.asarray(std)[:, None, None]


def layernorm(x, w, b, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def linear(x, sd, name):
    return x @ sd[name + ".weight"].T + sd[name + ".bias"]


def gelu(x, approx="erf"):
    if approx == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def conv_patches(img, w, b):
    """Conv2d(kernel = stride = P) written as a loop over output positions."""
    D, _, P, _ = w.shape
    n = img.shape[1] // P
    out = np.empty((n, n, D))
    for i in range(n):
        for j in range(n):
            patch = img[:, i * P:(i + 1) * P, j * P:(j + 1) * P]
            out[i, j] = np.tensordot(w, patch, axes=([1, 2, 3], [0, 1, 2])) + b
    return out.reshape(n * n, D)


def forward(sd: dict, img: np.ndarray, heads: int, depth: int, pool: str, gelu_approx="erf") -> dict:
    sd = {k: np.asarray(v, np.float64) for k, v in sd.items()}
    x = conv_patches(img, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"])
    if pool == "token":
        x = np.concatenate([sd["cls_token"][0], x])
    x = x + sd["pos_embed"][0]
    N, C = x.shape
    hd = C // heads
    for i in range(depth):
        b = f"blocks.{i}."
        h = layernorm(x, sd[b + "norm1.weight"], sd[b + "norm1.bias"])
        qkv = linear(h, sd, b + "attn.qkv").reshape(N, 3, heads, hd).transpose(1, 2, 0, 3)
        q, k, v = qkv
        a = softmax((q * hd ** -0.5) @ k.transpose(0, 2, 1)) @ v          # [heads, N, hd]
        x = x + linear(a.transpose(1, 0, 2).reshape(N, C), sd, b + "attn.proj")
        h = layernorm(x, sd[b + "norm2.weight"], sd[b + "norm2.bias"])
        x = x + linear(gelu(linear(h, sd, b + "mlp.fc1"), gelu_approx), sd, b + "mlp.fc2")
    feats = layernorm(x, sd["norm.weight"], sd["norm.bias"])
    if pool == "token":
        return {"features": feats, "logits": linear(feats[0], sd, "head")[None]}
    a = "attn_pool."
    q = linear(sd[a + "latent"][0], sd, a + "q").reshape(1, heads, hd).transpose(1, 0, 2)   # [heads, 1, hd]
    kv = linear(feats, sd, a + "kv").reshape(N, 2, heads, hd).transpose(1, 2, 0, 3)
    k, v = kv
    o = softmax((q * hd ** -0.5) @ k.transpose(0, 2, 1)) @ v                                 # [heads, 1, hd]
    y = linear(o.transpose(1, 0, 2).reshape(1, C), sd, a + "proj")
    y = y + linear(gelu(linear(layernorm(y, sd[a + "norm.weight"], sd[a + "norm.bias"]), sd, a + "mlp.fc1"),
                        gelu_approx), sd, a + "mlp.fc2")
    return {"features": feats, "embedding": y[:1]}

"""timm's eval preprocessing re-implemented (independently of compiler/models/image.py)
and its VisionTransformer forward, for the towers Tessera models: what the fixture falls
back on when torch/timm are not installed (the fixture's `source` says which produced
it). The forward is compiler/timm_model.py, the independent model every tower trial is
checked against (it started here); it works on timm's state-dict names and layouts
directly ([N, C] tokens, conv weights [D, 3, P, P], Linear weights out×in) and shares no
code with compiler/models, compiler/reference.py or the graph.

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


def forward(sd: dict, img: np.ndarray, heads: int, depth: int, pool: str, gelu_approx="erf") -> dict:
    """timm's forward on `sd` (timm names) and one image [3, S, S]: the independent model,
    compiler/timm_model.py (moved there: every tower trial now checks against it)."""
    from compiler.timm_model import Arch
    from compiler.timm_model import forward as model_forward
    arch = Arch(heads=heads, depth=depth, pool=pool, gelu=gelu_approx,
                patch=int(np.shape(sd["patch_embed.proj.weight"])[-1]))
    return model_forward(sd, img, arch)

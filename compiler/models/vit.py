"""ViT: the whole tower (model.scope=tower: image -> embedding) or its encoder alone
(blocks). The encoder is `layers` pre-norm blocks as one Repeat whose per-layer weights
are sequences (LayerNorm, QKV, attention, projection, residual, LayerNorm, fc1, GELU,
fc2, residual). The tower adds, before the Repeat, the patch embedding (a matmul over
the patch rows the host sends, + bias, + pos_embed) and after it the final LayerNorm
(`features`) and timm's head: SigLIP's attention pool (`embedding`) or the class
token's Linear classifier (`logits`). Presets: so400m (1152 wide, 27 deep, MLP 4304,
16 heads, 384² image, patch 14: 729 tokens), b16 (768/12/3072/12, 224², patch 16, class
token: 197), g14 (ViT-g/14's dimensions 1408/40/6144/16, 224², patch 14, in b16's structure: 257). Weights FP8 e4m3 with per-tensor scales (or f16), activations and partials
FP16.

Weights are seeded, or imported from an .npz / .safetensors file with timm's names
(weights.py; Linear weights stored out×in, transposed here). An odd token count is
padded by one masked token (see attention.py).

This file builds the graph: `build` (the encoder's Repeat body inline), the tower's
patch embedding and head. The presets and VitConfig are vit_config.py; timm's weight names,
shapes, loading and seeding are vit_weights.py."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Repeat, Tensor
from .attention import attention_ops, padded
from .calibrate import calibrate, calibration_inputs, keep_in_f16, least_error_scales
from .centering import center
from .config import model_config
from .export import META, arch_meta
from .gemm import FP8_MAX, dequantize, quantize, quantize_members
from .image import load_batch, patch_rows
from .vit_config import CENTRED, VitConfig
from .vit_weights import _BLOCK_PARAMS, block_shapes, load_weights, seeded_weights, tower_shapes


def build(cfg: dict):
    c = model_config(VitConfig, cfg)
    d = c.dims()
    D, F, H, T0 = d["width"], d["hidden"], d["heads"], d["tokens"]
    T, hd = padded(T0, c.token_align), D // H
    L = c.layers
    B = c.batch if c.tower else 1
    R = B * T                         # rows: image b's tokens at [b·T, (b+1)·T)
    rng = np.random.default_rng(c.seed)
    shapes = block_shapes(L, D, F) | (tower_shapes(d, c.classes) if c.tower else {})
    ignored = []
    if c.weights:
        w, ignored = load_weights(c.weights, shapes)
    else:
        w = seeded_weights(c.seed, L, D, F, shapes)     # lazy: one tensor's float32 at a time
    g = Graph(f"vit_{c.preset}_{'tower' if c.tower else 'blocks'}_L{L}_{c.weight_dtype}")
    g.meta["ignored_tensors"] = ignored
    if c.tower:
        g.meta[META] = arch_meta(c, d)     # the independent model's (compiler/model_check.py): from the config
        g.meta["images"] = B               # per run: run's images_per_s and latency_ms count them
    data = {}
    if c.tower:
        patch_embedding(g, data, c, d, w, rng, T, B)
    else:
        data["x"] = np.zeros((T, D), np.float16)
        data["x"][:T0] = rng.standard_normal((T0, D))
        g.add(Tensor("x", (T, D), "f16", "input"))
    first = len(g.ops)

    def param(name, shape, dtype, transpose=False):
        """A sequence: member i is block i's tensor (Linear weights as in×out), quantized
        layer by layer (one FP8 scale per layer: Tensor.scale a tuple of L)."""
        layer = lambda i: w[f"blocks.{i}.{name}"].T if transpose else w[f"blocks.{i}.{name}"]
        stored, scale = quantize_members(L, lambda i: np.reshape(layer(i), shape), dtype)
        g.add(Tensor(name, shape, dtype, "param", scale))
        data[name] = stored
        return name

    def act(name, cols):
        return g.add(Tensor(name, (R, cols), "f16", "act")).name

    def linear(xin, wname, y, k, n):
        """x·W + b (timm Linear: W stored out×in, b in f16)."""
        g.op("matmul", [xin, param(wname, (k, n), c.weight_dtype, True)], [act(y + ".xw", n)], m=R, k=k, n=n)
        bname = wname.replace(".weight", ".bias")
        g.op("bias", [y + ".xw", param(bname, (1, n), "f16")], [act(y, n)])
        return y

    def value(name):
        """[L, ...] float64 values of a parameter sequence as the device stores them."""
        return dequantize(data[name], g.tensors[name].scale)

    def fp8(y, bound):
        """Cast y to FP8, one scale per layer (a tuple: the cast's scale word reads a
        per-iteration table). fp8_scales=bound: from `bound()` [L, cols], a bound on |y|
        for any input x (the cast saturates, so it need only be tight, not exact: f16
        rounding). least_error, calibrated: placeholders here, set after the build
        (compiler/models/calibrate.py)."""
        if not c.fp8_activations:
            return y, 0.0
        if c.fp8_scales == "bound":
            sc = bound().max(1) / FP8_MAX
        else:
            sc = np.ones(L)
        scale = tuple(float(v) for v in sc)
        g.add(Tensor(y + ".fp8", (R, g.tensors[y].shape[1]), "fp8", "act", scale))
        g.op("cast", [y], [y + ".fp8"], scale=scale)
        return y + ".fp8", sc

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
        cs = np.asarray(cast_scale, np.float64).reshape(-1, 1)      # per layer
        err = 2.0 ** -4 * (zterm + np.einsum("li,lij->lj", np.abs(bet), aw)) + cs * 2.0 ** -10 * aw.sum(1)
        return zterm + np.abs(np.einsum("li,lij->lj", bet, w) + b) + (err if np.any(cs) else 0)

    # one encoder block: the Repeat body, every parameter a sequence over the layers
    h, s1 = norm("x", "norm1", "ln1")
    qkv = linear(h, "attn.qkv.weight", "qkv", D, 3 * D)
    if c.attention == "flash":     # the same function, S never stored whole (attention.py)
        g.op("flash_attention", [qkv, qkv, qkv], [act("attn", D)], tokens=T, heads=H, head_dim=hd,
             valid=T0, block=128, scale=1 / np.sqrt(hd), cols=(0, D, 2 * D), batch=B)
    else:   # model.fp8_scores: q and k in FP8 (the whole QKV output cast: V's third unread by the scores)
        qk = fp8(qkv, lambda: after_norm("norm1", s1, "attn.qkv.weight"))[0] if c.fp8_scores else qkv
        attention_ops(g, qk, qk, qkv, act("attn", D), T, H, hd, valid=T0, cols=(0, D, 2 * D), batch=B)
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
    g.add(Tensor("y", (R, D), "f16", "act" if c.tower else "output"))
    g.op("add", ["res1", "fc2"], ["y"])
    seqs = tuple(n for n in g.tensors if n in data and n in _BLOCK_PARAMS)
    g.repeat = Repeat(L, (("y", "x"),), seqs, first, len(g.ops))
    if c.tower:
        head(g, data, c, d, w, T, B)
    if c.fp8_activations and c.fp8_scales != "bound":
        samples = calibration_inputs(c, d, T, B)
        if c.fp8_centering != "none":
            center(g, data, samples, CENTRED[c.fp8_centering])
        if c.fp8_scales == "calibrated":
            calibrate(g, data, samples, c.fp8_headroom)
        else:
            errors = {}
            least_error_scales(g, data, samples, c.fp8_headroom, errors)
            g.meta["fp8_cast_error"] = {n: round(e, 6) for n, e in sorted(errors.items())}
            if c.fp8_fallback:
                g.meta["fp8_fallback"] = sorted(n for n, e in errors.items() if e > c.fp8_fallback_error)
                g = keep_in_f16(g, g.meta["fp8_fallback"])
    return g, data


def _linear_param(g, data, name, w, dtype, transpose=True):
    """A parameter used once (outside the Repeat): Linear weights as in×out."""
    arr = w.T if transpose else w
    stored, scale = quantize(arr, dtype)
    g.add(Tensor(name, arr.shape, dtype, "param", scale))
    data[name] = stored
    return name


def _linear(g, data, c, w, xin, wname, y, rows, k, n, out_kind="act", groups=()):
    """x·W + b over `rows` rows of x (timm Linear: W stored out×in, b in f16); with
    `groups`, one row per group (the class token of each image)."""
    out_rows = len(groups) or rows
    g.add(Tensor(y + ".xw", (out_rows, n), "f16", "act"))
    extra = {"groups": groups} if groups else {}
    g.op("matmul", [xin, _linear_param(g, data, wname, w[wname], c.weight_dtype)], [y + ".xw"], m=rows, k=k, n=n,
         **extra)
    bname = wname.replace(".weight", ".bias")
    g.add(Tensor(y, (out_rows, n), "f16", out_kind))
    g.op("bias", [y + ".xw", _linear_param(g, data, bname, w[bname][None, :], "f16", False)], [y])
    return y


def patch_embedding(g, data, c, d, w, rng, T, B):
    """x = patches·W + b + pos_embed: the 14×14 stride-14 convolution as a matmul over
    patch rows (image.patch_rows, sent so by the host). With a class token (pool=token)
    row 0 of the pixel rows is zero and the position table's row 0 carries
    cls_token + pos_embed[0] - b (folded on the host, one f16 rounding), so x[0] =
    cls_token + pos_embed[0] as timm's _pos_embed makes it. The padding row (odd token
    counts) is zero pixels: masked out of every softmax."""
    D, P, S = d["width"], d["patch"], d["image"]
    cls = d["pool"] == "token"
    images = load_batch(c.input, B, S, d["crop_pct"], d["mean"], d["std"], rng, d["interpolation"])
    K = 3 * P * P
    data["pixels"] = np.zeros((B * T, K), np.float16)
    for b, pix in enumerate(images):
        rows = patch_rows(pix, P)
        data["pixels"][b * T + int(cls):b * T + int(cls) + len(rows)] = rows
    g.add(Tensor("pixels", (B * T, K), "f16", "input"))
    wp = w["patch_embed.proj.weight"].reshape(D, K)
    wd = {"patch_embed.proj.weight": wp, "patch_embed.proj.bias": w["patch_embed.proj.bias"]}
    _linear(g, data, c, wd, "pixels", "patch_embed.proj.weight", "patches", B * T, K, D)
    pos = np.zeros((T, D), np.float32)
    pos[:d["tokens"]] = w["pos_embed"][0]
    if cls:
        pos[0] += w["cls_token"][0, 0] - w["patch_embed.proj.bias"]
    data["pos_embed"] = np.tile(pos.astype(np.float16), (B, 1))     # one copy per image (host layout)
    g.add(Tensor("pos_embed", (B * T, D), "f16", "param"))
    g.add(Tensor("x", (B * T, D), "f16", "act"))
    g.op("add", ["patches", "pos_embed"], ["x"])


def head(g, data, c, d, w, T, B):
    """Final LayerNorm (its output, `features`, is a graph output), then timm's head:
    pool=map, AttentionPoolLatent: q = latent·Wq + bq, k|v = features·Wkv + bkv (k the
    first D columns, head h at columns h·hd), softmax(q·kᵀ/√hd) over the real tokens,
    ·v, proj, then x + mlp(norm(x)); the latent's token 0 is the `embedding`.
    pool=token: `logits` = features[0]·W + b (class token)."""
    D, F, H = d["width"], d["hidden"], d["heads"]
    T0, hd = d["tokens"], D // H
    g.add(Tensor("features", (B * T, D), "f16", "output"))
    nw, nb = (_linear_param(g, data, k, w[k][None, :], "f16", False) for k in ("norm.weight", "norm.bias"))
    g.op("layernorm", ["y", nw, nb], ["features"], eps=c.eps)
    if d["pool"] == "token":
        _linear(g, data, c, w, "features", "head.weight", "logits", 1, D, c.classes, "output",
                groups=tuple((b * T, 0, 0, 0, b, 0) for b in range(B)) if B > 1 else ())
        return
    a = "attn_pool."
    lat = _linear_param(g, data, a + "latent", w[a + "latent"][0], "f16", False)
    q = _linear(g, data, c, w, lat, a + "q.weight", "pool.q", 1, D, D)
    kv = _linear(g, data, c, w, "features", a + "kv.weight", "pool.kv", B * T, D, 2 * D)
    g.add(Tensor("pool.scores", (B * H, T), "f16", "act"))
    g.add(Tensor("pool.probs", (B * H, T), "f16", "act"))
    g.add(Tensor("pool.attn", (B, D), "f16", "act"))
    bh = [(b, h) for b in range(B) for h in range(H)]         # image b's head h: row b·H + h
    g.op("matmul", [q, kv], ["pool.scores"], m=1, k=hd, n=T, transpose_b=True, scale=1 / np.sqrt(hd),
         groups=tuple((0, h * hd, b * T, h * hd, b * H + h, 0) for b, h in bh))
    g.op("softmax", ["pool.scores"], ["pool.probs"], valid=T0 if T0 != T else 0)
    g.op("matmul", ["pool.probs", kv], ["pool.attn"], m=1, k=T, n=hd,
         groups=tuple((b * H + h, 0, b * T, D + h * hd, b, h * hd) for b, h in bh))
    x = _linear(g, data, c, w, "pool.attn", a + "proj.weight", "pool.proj", B, D, D)
    g.add(Tensor("pool.ln", (B, D), "f16", "act"))
    nw, nb = (_linear_param(g, data, a + k, w[a + k][None, :], "f16", False) for k in ("norm.weight", "norm.bias"))
    g.op("layernorm", [x, nw, nb], ["pool.ln"], eps=c.eps)
    h1 = _linear(g, data, c, w, "pool.ln", a + "mlp.fc1.weight", "pool.fc1", B, D, F)
    g.add(Tensor("pool.gelu", (B, F), "f16", "act"))
    g.op("gelu", [h1], ["pool.gelu"], approx=c.gelu)
    h2 = _linear(g, data, c, w, "pool.gelu", a + "mlp.fc2.weight", "pool.fc2", B, F, D)
    g.add(Tensor("embedding", (B, D), "f16", "output"))
    g.op("add", [x, h2], ["embedding"])

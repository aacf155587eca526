"""The independent model: timm's VisionTransformer forward written from timm's own
definitions (timm/models/vision_transformer.py: PatchEmbed, _pos_embed, Block, Attention,
Mlp, the final norm, forward_head; timm/layers/attention_pool.py: AttentionPoolLatent),
in float64, on a timm-named state dict and the preprocessed image. The third level of
"correct" (DESIGN.md §7a): it shares no code with compiler/models, compiler/reference.py,
compiler/reference_ops.py, compiler/ir.py or the graph, so a wrong graph (an attention scale, a GELU form, a missing
position table, a LayerNorm eps, swapped q/k, a wrong pooling latent) shows as a
mismatch between the device and this model instead of passing as Tessera agreeing with
itself.

Semantics followed (timm 1.0): PatchEmbed = Conv2d(3, D, P, stride P) + bias, flattened
row-major over the patch grid (a stride-P convolution drops the last S mod P pixels);
class token prepended, then pos_embed added (no_embed_class=False); Block:
x + proj(attn(norm1(x))), x + fc2(gelu(fc1(norm2(x)))); qkv's output features ordered
(3, heads, head_dim); attention softmax(q·kᵀ · head_dim^-½)·v; LayerNorm eps from the
config (timm's ViTs: 1e-6); GELU exact (erf) or tanh; final norm = `features`. Head
'map' (AttentionPoolLatent): q = latent·Wq + bq, k|v from kv(features) split (2, heads,
head_dim), attention, proj, then y + mlp(norm(y)); its token 0 is the `embedding`.
Head 'token': `logits` = head(features[0]).

Deterministic: every byte this produces is a function of its inputs, whatever the CPU,
SIMD width, BLAS or thread count. No BLAS: matmuls are our own numba kernels (no
fastmath, so no reassociation and no FMA contraction), each output element summed by one
thread in k order (rows split over `THREADS` threads); reductions (LayerNorm, softmax)
are sequential loops; exp, erf and tanh are libm's scalar functions (numba's SVML is not
used: numba.config.USING_SVML is False in this environment). Callers round what they
store (compiler/model_check.py)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from .numba_probe import njit     # numba without its scipy.linalg probe

THREADS = 2
# timm's definitions of the named models (timm 1.0.31, read off create_model: LayerNorm eps 1e-6,
# GELU(approximate="none"), in both): a preset trial is checked against these, not against
# its model.eps / model.gelu (a config that changes them is no longer timm's model)
TIMM = {"so400m": dict(eps=1e-6, gelu="erf"), "b16": dict(eps=1e-6, gelu="erf")}
_ROWS, _JB, _KC = 6, 128, 128  # rows per pass, output columns and k terms per block (_mm_rows)


@dataclass(frozen=True)
class Arch:
    """What the forward needs beyond the weights (timm's constructor arguments)."""
    heads: int
    depth: int
    pool: str                 # map | token
    gelu: str = "erf"         # erf | tanh
    eps: float = 1e-6
    patch: int = 16


@njit(cache=True, nogil=True)
def _mm_rows(a, b, out, r0, r1):
    """out[r0:r1] = a[r0:r1] @ b, each out[i, j] = Σ_k a[i, k]·b[k, j] summed in k order,
    product by product (out[i, j] = out[i, j] + a[i, k]·b[k, j], each rounded): the running
    sums live in `out` itself, a float64 holding each exactly, so b is read in blocks of
    _KC rows x _JB columns (128 KB, kept in L2 while every row passes over it) and the
    order of the terms never changes. Six rows at a time share each load of b, four k terms
    per pass over a row's sums (a quarter of the loads and stores of one term a pass: on
    an AVX2 host So400m's four products take 1.5-3.3x less time than with one term a pass,
    experiments/host_time/README.md). The j loop vectorises across outputs, never across terms,
    so any SIMD width, row grouping or block size gives the same bytes."""
    K = a.shape[1]
    N = b.shape[1]
    r6 = r0 + (r1 - r0) // _ROWS * _ROWS
    out[r0:r1, :] = 0.0
    for j0 in range(0, N, _JB):
        j1 = min(N, j0 + _JB)
        w = j1 - j0
        for k0 in range(0, K, _KC):
            k1 = min(K, k0 + _KC)
            k4 = k0 + (k1 - k0) // 4 * 4
            for r in range(r0, r6, _ROWS):
                c0, c1, c2 = out[r, j0:j1], out[r + 1, j0:j1], out[r + 2, j0:j1]
                c3, c4, c5 = out[r + 3, j0:j1], out[r + 4, j0:j1], out[r + 5, j0:j1]
                for k in range(k0, k4, 4):
                    b0, b1, b2, b3 = b[k, j0:j1], b[k + 1, j0:j1], b[k + 2, j0:j1], b[k + 3, j0:j1]
                    x00, x01, x02, x03 = a[r, k], a[r, k + 1], a[r, k + 2], a[r, k + 3]
                    x10, x11, x12, x13 = a[r + 1, k], a[r + 1, k + 1], a[r + 1, k + 2], a[r + 1, k + 3]
                    x20, x21, x22, x23 = a[r + 2, k], a[r + 2, k + 1], a[r + 2, k + 2], a[r + 2, k + 3]
                    x30, x31, x32, x33 = a[r + 3, k], a[r + 3, k + 1], a[r + 3, k + 2], a[r + 3, k + 3]
                    x40, x41, x42, x43 = a[r + 4, k], a[r + 4, k + 1], a[r + 4, k + 2], a[r + 4, k + 3]
                    x50, x51, x52, x53 = a[r + 5, k], a[r + 5, k + 1], a[r + 5, k + 2], a[r + 5, k + 3]
                    for j in range(w):
                        v0, v1, v2, v3 = b0[j], b1[j], b2[j], b3[j]
                        c0[j] = (((c0[j] + x00 * v0) + x01 * v1) + x02 * v2) + x03 * v3
                        c1[j] = (((c1[j] + x10 * v0) + x11 * v1) + x12 * v2) + x13 * v3
                        c2[j] = (((c2[j] + x20 * v0) + x21 * v1) + x22 * v2) + x23 * v3
                        c3[j] = (((c3[j] + x30 * v0) + x31 * v1) + x32 * v2) + x33 * v3
                        c4[j] = (((c4[j] + x40 * v0) + x41 * v1) + x42 * v2) + x43 * v3
                        c5[j] = (((c5[j] + x50 * v0) + x51 * v1) + x52 * v2) + x53 * v3
                for k in range(k4, k1):     # the block's last < 4 terms, one a pass
                    bk = b[k, j0:j1]
                    x0, x1, x2, x3, x4, x5 = a[r, k], a[r + 1, k], a[r + 2, k], a[r + 3, k], a[r + 4, k], a[r + 5, k]
                    for j in range(w):
                        v = bk[j]
                        c0[j] += x0 * v
                        c1[j] += x1 * v
                        c2[j] += x2 * v
                        c3[j] += x3 * v
                        c4[j] += x4 * v
                        c5[j] += x5 * v
            for r in range(r6, r1):         # the last < 6 rows one at a time, the same order
                c0 = out[r, j0:j1]
                for k in range(k0, k1):
                    x0 = a[r, k]
                    bk = b[k, j0:j1]
                    for j in range(w):
                        c0[j] += x0 * bk[j]


def matmul(a, b) -> np.ndarray:
    """a @ b in float64 with a fixed summation order (module docstring)."""
    a = np.ascontiguousarray(a, np.float64)
    b = np.ascontiguousarray(b, np.float64)
    M = a.shape[0]
    out = np.empty((M, b.shape[1]))
    if M < 64:
        _mm_rows(a, b, out, 0, M)
        return out
    cuts = [M * t // THREADS for t in range(THREADS + 1)]
    with ThreadPoolExecutor(THREADS) as ex:
        list(ex.map(lambda t: _mm_rows(a, b, out, cuts[t], cuts[t + 1]), range(THREADS)))
    return out


@njit(cache=True)
def _layernorm(x, w, b, eps):
    n, d = x.shape
    out = np.empty_like(x)
    for i in range(n):
        s = 0.0
        for j in range(d):
            s += x[i, j]
        mu = s / d
        v = 0.0
        for j in range(d):
            v += (x[i, j] - mu) * (x[i, j] - mu)
        inv = 1.0 / math.sqrt(v / d + eps)
        for j in range(d):
            out[i, j] = (x[i, j] - mu) * inv * w[j] + b[j]
    return out


@njit(cache=True)
def _softmax(x):
    n, d = x.shape
    out = np.empty_like(x)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = 0.0
        for j in range(d):
            out[i, j] = math.exp(x[i, j] - m)
            s += out[i, j]
        for j in range(d):
            out[i, j] /= s
    return out


@njit(cache=True)
def _gelu(x, tanh_form):
    out = np.empty_like(x)
    flat, o = x.ravel(), out.ravel()
    c = math.sqrt(2.0 / math.pi)
    for i in range(flat.size):
        v = flat[i]
        if tanh_form:
            o[i] = 0.5 * v * (1.0 + math.tanh(c * (v + 0.044715 * v * v * v)))
        else:
            o[i] = 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))
    return out


def _f64(sd: Mapping, name: str) -> np.ndarray:
    return np.asarray(sd[name], np.float64)


def layernorm(x, sd, name, eps):
    return _layernorm(np.ascontiguousarray(x), _f64(sd, name + ".weight").ravel(),
                      _f64(sd, name + ".bias").ravel(), eps)


def linear(x, sd, name):
    """timm's nn.Linear: x·Wᵀ + b, W out×in (a transposed view of an in×out array, as
    models/export.py hands it, is Wᵀ without a copy)."""
    return matmul(x, _f64(sd, name + ".weight").T) + _f64(sd, name + ".bias")


def attention(q, k, v, heads: int) -> np.ndarray:
    """Scaled dot-product attention per head: q [n, C], k and v [N, C], head h at
    columns h·hd .. (h+1)·hd; softmax(q·kᵀ · hd^-½)·v, heads concatenated."""
    C = q.shape[1]
    hd = C // heads
    out = np.empty((q.shape[0], C))
    for h in range(heads):
        s = slice(h * hd, (h + 1) * hd)
        p = _softmax(matmul(q[:, s], k[:, s].T) * hd ** -0.5)
        out[:, s] = matmul(p, v[:, s])
    return out


def patch_tokens(img: np.ndarray, sd: Mapping, patch: int) -> np.ndarray:
    """Conv2d(3, D, P, stride P) on [3, S, S] as a matmul over the patches, row-major
    over the grid: [n², D]."""
    w = _f64(sd, "patch_embed.proj.weight")                 # [D, 3, P, P]
    D, P = w.shape[0], patch
    n = img.shape[1] // P
    cols = np.empty((n * n, 3 * P * P))
    for i in range(n):
        for j in range(n):
            cols[i * n + j] = img[:, i * P:(i + 1) * P, j * P:(j + 1) * P].ravel()
    return matmul(cols, w.reshape(D, -1).T) + _f64(sd, "patch_embed.proj.bias")


def forward(sd: Mapping, img: np.ndarray, arch: Arch) -> dict:
    """One image [3, S, S] -> {"features": [N, D], "embedding" | "logits": [1, ...]},
    float64. `sd` maps timm's names to arrays (read one at a time: it may be lazy)."""
    x = patch_tokens(np.asarray(img, np.float64), sd, arch.patch)
    if arch.pool == "token":
        x = np.concatenate([_f64(sd, "cls_token").reshape(1, -1), x])
    x = x + _f64(sd, "pos_embed")[0]
    for i in range(arch.depth):
        b = f"blocks.{i}."
        qkv = linear(layernorm(x, sd, b + "norm1", arch.eps), sd, b + "attn.qkv")
        C = x.shape[1]
        a = attention(qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:], arch.heads)
        x = x + linear(a, sd, b + "attn.proj")
        h = linear(layernorm(x, sd, b + "norm2", arch.eps), sd, b + "mlp.fc1")
        x = x + linear(_gelu(h, arch.gelu == "tanh"), sd, b + "mlp.fc2")
    feats = layernorm(x, sd, "norm", arch.eps)
    if arch.pool == "token":
        return {"features": feats, "logits": linear(feats[:1], sd, "head")}
    p = "attn_pool."
    C = feats.shape[1]
    q = linear(_f64(sd, p + "latent").reshape(-1, C), sd, p + "q")
    kv = linear(feats, sd, p + "kv")
    y = linear(attention(q, kv[:, :C], kv[:, C:], arch.heads), sd, p + "proj")
    m = linear(_gelu(linear(layernorm(y, sd, p + "norm", arch.eps), sd, p + "mlp.fc1"), arch.gelu == "tanh"),
               sd, p + "mlp.fc2")
    return {"features": feats, "embedding": (y + m)[:1]}

"""Materialized attention, B1: O = softmax(Q·Kᵀ/√d)·V per head, heads as column
windows of Q, K, V, O [tokens, heads·head_dim] (So400m: 16 heads × 72, 729 tokens).
S = Q·Kᵀ is stored as [heads·tokens, tokens] (head h's rows at h·tokens)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Tensor
from .config import check_positive, model_config


@dataclass(frozen=True)
class AttentionConfig:
    name: str = "attention"
    tokens: int = 729
    heads: int = 16
    head_dim: int = 72
    seed: int = 0

    def check(self):
        check_positive(self, "tokens", "heads", "head_dim")
        if self.head_dim % 2:
            raise ValueError(f"model.head_dim={self.head_dim}: must be even (rows move as 32-bit words)")


def attention_ops(g: Graph, q: str, k: str, v: str, out: str, T: int, H: int, d: int, prefix: str = ""):
    s, p = f"{prefix}scores", f"{prefix}probs"
    g.add(Tensor(s, (H * T, T), "f16", "act"))
    g.add(Tensor(p, (H * T, T), "f16", "act"))
    g.op("matmul", [q, k], [s], m=T, k=d, n=T, transpose_b=True, scale=1 / np.sqrt(d),
         groups=tuple((0, h * d, 0, h * d, h * T, 0) for h in range(H)))
    g.op("softmax", [s], [p])
    g.op("matmul", [p, v], [out], m=T, k=T, n=d,
         groups=tuple((h * T, 0, 0, h * d, 0, h * d) for h in range(H)))


def build(cfg: dict):
    c = model_config(AttentionConfig, cfg)
    rng = np.random.default_rng(c.seed)
    T, H, d = c.tokens, c.heads, c.head_dim
    g = Graph(f"attention_{T}x{H}x{d}")
    data = {}
    for n in ("Q", "K", "V"):
        g.add(Tensor(n, (T, H * d), "f16", "input"))
        data[n] = rng.standard_normal((T, H * d)).astype(np.float16)
    g.add(Tensor("O", (T, H * d), "f16", "output"))
    attention_ops(g, "Q", "K", "V", "O", T, H, d)
    return g, data

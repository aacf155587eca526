"""Attention, B1, materialized (`attention`) or blocked over keys with a running max
and sum (`flash_attention`, one op; S is never stored whole). Materialized: O = softmax(Q·Kᵀ/√d)·V per head, heads as column
windows of Q, K, V, O [tokens, heads·head_dim] (So400m: 16 heads × 72, 729 tokens).
S = Q·Kᵀ is stored as [heads·tokens, tokens] (head h's rows at h·tokens).

Rows move as whole 32-bit words, so an odd token count is padded by one zero token
(`padded`): the padding key is masked out of every softmax (SOFTMAX `valid`), the
padding query's row is computed and ignored, so real tokens see exact attention."""
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
    block: int = 128            # flash_attention: keys per block
    seed: int = 0

    def check(self):
        check_positive(self, "tokens", "heads", "head_dim", "block")
        if self.head_dim % 2:
            raise ValueError(f"model.head_dim={self.head_dim}: must be even (rows move as 32-bit words)")


def padded(tokens: int, align: int = 2) -> int:
    """Tokens padded with masked zero tokens to a multiple of `align` (2: rows move as whole
    32-bit words; model.token_align 4: an f16 row of keys is whole 64-bit words, so a softmax
    may run over any row of a tile's block alone, plan/rowcalls.py)."""
    return tokens + (-tokens) % align


def attention_ops(g: Graph, q: str, k: str, v: str, out: str, T: int, H: int, d: int, prefix: str = "",
                  valid: int = 0, cols: tuple = (0, 0, 0), batch: int = 1):
    """Ops of attention over column windows: head h of q/k/v at cols[i] + h·d; with a
    batch, image b's tokens are rows [b·T, (b+1)·T) and attend among themselves
    (S row block (b·H + h)·T)."""
    s, p = f"{prefix}scores", f"{prefix}probs"
    g.add(Tensor(s, (batch * H * T, T), "f16", "act"))
    g.add(Tensor(p, (batch * H * T, T), "f16", "act"))
    cq, ck, cv = cols
    bh = [(b, h) for b in range(batch) for h in range(H)]
    g.op("matmul", [q, k], [s], m=T, k=d, n=T, transpose_b=True, scale=1 / np.sqrt(d),
         groups=tuple((b * T, cq + h * d, b * T, ck + h * d, (b * H + h) * T, 0) for b, h in bh))
    g.op("softmax", [s], [p], valid=valid if valid != T else 0)
    g.op("matmul", [p, v], [out], m=T, k=T, n=d,
         groups=tuple(((b * H + h) * T, 0, b * T, cv + h * d, b * T, h * d) for b, h in bh))


def build(cfg: dict):
    c = model_config(AttentionConfig, cfg)
    rng = np.random.default_rng(c.seed)
    H, d = c.heads, c.head_dim
    T = padded(c.tokens)
    g = Graph(f"attention_{c.tokens}x{H}x{d}")
    data = {}
    for n in ("Q", "K", "V"):
        g.add(Tensor(n, (T, H * d), "f16", "input"))
        data[n] = np.zeros((T, H * d), np.float16)
        data[n][:c.tokens] = rng.standard_normal((c.tokens, H * d))
    g.add(Tensor("O", (T, H * d), "f16", "output"))
    if c.name == "flash_attention":
        g.op("flash_attention", ["Q", "K", "V"], ["O"], tokens=T, heads=H, head_dim=d, valid=c.tokens,
             block=c.block, scale=1 / np.sqrt(d))
    else:
        attention_ops(g, "Q", "K", "V", "O", T, H, d, valid=c.tokens)
    return g, data

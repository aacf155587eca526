"""GEMM model: C = A·B with A (m×k) an input and B (k×n) a parameter.

f16: A, B stored as float16. fp8: A, B stored as e4m3 (ml_dtypes.float8_e4m3fn)
with a per-tensor scale each; the product is formed with FP16 partials and an
FP16 output. Data is seeded and at realistic scale (B ~ N(0, 1/k))."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..ir import Graph, Tensor
from ..target import ConfigError
from .config import check_positive, model_config
from .fp8cast import to_fp8

FP8 = ml_dtypes.float8_e4m3fn
FP8_MAX = float(ml_dtypes.finfo(FP8).max)


@dataclass(frozen=True)
class GemmConfig:
    name: str = "gemm"
    m: int = 32
    k: int = 64
    n: int = 64
    dtype: str = "f16"
    seed: int = 0

    def check(self):
        check_positive(self, "m", "k", "n")
        if self.dtype not in ("f16", "fp8"):
            raise ConfigError(f"model.dtype={self.dtype!r}: not one of f16, fp8")
        # exchange and local copies move whole 32-bit words: rows of k and n elements
        word = 4 if self.dtype == "fp8" else 2
        for d in ("k", "n"):
            if getattr(self, d) % word:
                raise ConfigError(f"model.{d}={getattr(self, d)}: must be a multiple of {word} for "
                                  f"{self.dtype} (rows are moved as whole 32-bit words)")


def quantize(x: np.ndarray, dtype: str) -> tuple[np.ndarray, float]:
    """Stored array and per-tensor scale (value = stored * scale)."""
    if dtype == "f16":
        return x.astype(np.float16), 1.0
    scale = max(float(np.max(x)), -float(np.min(x))) / FP8_MAX or 1.0    # no |x| temporary
    if x.dtype == np.float32:               # = (x / scale).astype(FP8) bit for bit, ~3x faster
        return to_fp8(x, scale), scale
    return (x / scale).astype(FP8), scale


def quantize_members(count: int, member, dtype: str, workers: int = 2) -> tuple[np.ndarray, float | tuple]:
    """A sequence quantized member by member (one FP8 scale per layer: a layer whose
    weights are 2^10 smaller than another's keeps its mantissa instead of flushing to
    zero under a shared scale). `member(i)` makes member i's float array (all of one
    shape): members are made and cast on `workers` threads (seeding and the cast release
    the GIL), each into its row of the result, so at most `workers` float copies exist at
    a time and the bytes do not depend on the thread count. FP8: (stored [L, ...], tuple
    of L scales); f16: (stored, 1.0)."""
    q0, s0 = quantize(np.asarray(member(0)), dtype)
    out = np.empty((count,) + q0.shape, q0.dtype)
    out[0] = q0
    del q0

    def one(i):
        q, sc = quantize(np.asarray(member(i)), dtype)
        out[i] = q
        return float(sc)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        scales = [float(s0)] + list(pool.map(one, range(1, count)))
    return out, (tuple(scales) if dtype != "f16" else 1.0)


def dequantize(stored: np.ndarray, scale) -> np.ndarray:
    """float64 values; a tuple scale applies member i's to stored[i]."""
    s = np.asarray(scale, np.float64)
    return stored.astype(np.float64) * s.reshape(s.shape + (1,) * (stored.ndim - s.ndim))


def build(cfg: dict):
    c = model_config(GemmConfig, cfg)
    rng = np.random.default_rng(c.seed)
    a, sa = quantize(rng.standard_normal((c.m, c.k)), c.dtype)
    b, sb = quantize(rng.standard_normal((c.k, c.n)) / np.sqrt(c.k), c.dtype)
    g = Graph(f"gemm_{c.m}x{c.k}x{c.n}_{c.dtype}")
    g.add(Tensor("A", (c.m, c.k), c.dtype, "input", sa))
    g.add(Tensor("B", (c.k, c.n), c.dtype, "param", sb))
    g.add(Tensor("C", (c.m, c.n), "f16", "output"))
    g.op("matmul", ["A", "B"], ["C"], m=c.m, k=c.k, n=c.n)
    return g, {"A": a, "B": b}

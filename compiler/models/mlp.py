"""MLP block: y = GELU(x·W1)·W2 over `tokens` rows (So400m widths 1152 → 4304 → 1152).
Weights FP8 e4m3 with per-tensor scales (or f16); activations and partials FP16.
`repeat` > 1 runs the block as a Repeat: the body once, its weights as sequences
with one member per iteration, y carried back into x."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Repeat, Tensor
from .config import check_positive, model_config
from .gemm import quantize


@dataclass(frozen=True)
class MlpConfig:
    name: str = "mlp"
    tokens: int = 729
    batch: int = 1
    width: int = 1152
    hidden: int = 4304
    weight_dtype: str = "fp8"
    gelu: str = "tanh"
    repeat: int = 1
    seed: int = 0

    def check(self):
        check_positive(self, "tokens", "batch", "width", "hidden", "repeat")
        if self.weight_dtype not in ("f16", "fp8"):
            raise ValueError(f"model.weight_dtype={self.weight_dtype!r}: not one of f16, fp8")
        if self.gelu not in ("tanh", "erf"):
            raise ValueError(f"model.gelu={self.gelu!r}: not one of tanh, erf")


def linear(g: Graph, data: dict, rng, x: str, name: str, k: int, n: int, rows: int, wdtype: str,
           count: int = 0) -> str:
    """x·W with W seeded at realistic scale (a sequence of `count` members if count)."""
    shape = (count, k, n) if count else (k, n)
    w, s = quantize(rng.standard_normal(shape) / np.sqrt(k), wdtype)
    g.add(Tensor(name, (k, n), wdtype, "param", s))
    data[name] = w
    y = f"{name}.out"
    g.add(Tensor(y, (rows, n), "f16", "act"))
    g.op("matmul", [x, name], [y], m=rows, k=k, n=n)
    return y


def build(cfg: dict):
    c = model_config(MlpConfig, cfg)
    rng = np.random.default_rng(c.seed)
    rows = c.tokens * c.batch
    g = Graph(f"mlp_{rows}x{c.width}x{c.hidden}_r{c.repeat}_{c.weight_dtype}")
    data = {"x": rng.standard_normal((rows, c.width)).astype(np.float16)}
    g.add(Tensor("x", (rows, c.width), "f16", "input"))
    count = c.repeat if c.repeat > 1 else 0
    h = linear(g, data, rng, "x", "fc1", c.width, c.hidden, rows, c.weight_dtype, count)
    g.add(Tensor("gelu", (rows, c.hidden), "f16", "act"))
    g.op("gelu", [h], ["gelu"], approx=c.gelu)
    y = linear(g, data, rng, "gelu", "fc2", c.hidden, c.width, rows, c.weight_dtype, count)
    g.tensors[y] = Tensor(y, (rows, c.width), "f16", "output")
    if count:
        g.repeat = Repeat(count, ((y, "x"),), ("fc1", "fc2"))
    return g, data

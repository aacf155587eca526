"""MLP block: y = GELU(x·W1)·W2 over `tokens` rows (So400m widths 1152 → 4304 → 1152).
Weights FP8 e4m3 with per-tensor scales (or f16); activations and partials FP16.
`repeat` > 1 chains that many MLP blocks (the body a Repeat will run; unrolled until
the Repeat lowering lands)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Tensor
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


def linear(g: Graph, data: dict, rng, x: str, name: str, k: int, n: int, rows: int, wdtype: str) -> str:
    w, s = quantize(rng.standard_normal((k, n)) / np.sqrt(k), wdtype)
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
    x = g.add(Tensor("x", (rows, c.width), "f16", "input")).name
    for r in range(c.repeat):
        h = linear(g, data, rng, x, f"fc1.{r}", c.width, c.hidden, rows, c.weight_dtype)
        a = g.add(Tensor(f"gelu.{r}", (rows, c.hidden), "f16", "act")).name
        g.op("gelu", [h], [a], approx=c.gelu)
        x = linear(g, data, rng, a, f"fc2.{r}", c.hidden, c.width, rows, c.weight_dtype)
    g.tensors[x] = Tensor(x, (rows, c.width), "f16", "output")
    return g, data

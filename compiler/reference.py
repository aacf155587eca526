"""Golden numpy execution of a graph (float64 on dequantized data) and the
tolerance the compiled program is held to."""
from __future__ import annotations

import numpy as np

from .ir import Graph

F16_UNIT = 2.0 ** -11   # unit roundoff of float16


def _value(g: Graph, data: dict, name: str) -> np.ndarray:
    return data[name].astype(np.float64) * g.tensors[name].scale


def run(g: Graph, data: dict) -> dict[str, np.ndarray]:
    env = {n: _value(g, data, n) for n in data}
    for op in g.ops:
        if op.kind == "matmul":
            a, b = (env[n] for n in op.inputs)
            env[op.outputs[0]] = a @ b
        else:
            raise NotImplementedError(f"reference: op {op.kind!r}")
    return {t.name: env[t.name].astype(np.float16) for t in g.of_kind("output")}


def tolerance(g: Graph, data: dict) -> float:
    """Max abs error allowed on any output element. The device rounds to f16 at most
    twice (per-tile partials, then the reduced sum) and the reference once; each
    rounding of a partial sum of a·b terms errs by at most u·Σ|a||b| (u = 2^-11),
    so 3u·max(|A|·|B|) bounds the difference (f32 accumulation error is negligible)."""
    worst = 0.0
    for op in g.ops:
        if op.kind == "matmul":
            a, b = (np.abs(_value(g, data, n)) for n in op.inputs)
            worst = max(worst, float((a @ b).max()))
    return 3 * F16_UNIT * worst

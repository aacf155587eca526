"""Golden numpy execution of a graph, and the tolerance the compiled program is held to.

The reference follows the graph's semantics: every op computes in float64 on the
dequantized inputs and its output is rounded to the tensor's dtype (f16), as the
device stores it. The device may still differ by rounding-level noise (f32
accumulation order, k-split partials rounded to f16, transcendental kernels), which
later ops propagate; the tolerance bounds that from the data itself."""
from __future__ import annotations

import math

import numpy as np

from .ir import Graph
from .models.gemm import FP8, FP8_MAX

F16_UNIT = 2.0 ** -11   # unit roundoff of float16
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _value(g: Graph, data: dict, name: str) -> np.ndarray:
    return data[name].astype(np.float64) * g.tensors[name].scale


def matmul(op, a, b):
    m, k, n = op.attr("m"), op.attr("k"), op.attr("n")
    groups = op.attr("groups", ((0, 0, 0, 0, 0, 0),))
    tb = op.attr("transpose_b", False)
    rows = max(g[4] for g in groups) + m
    cols = max(g[5] for g in groups) + n
    out = np.zeros((rows, cols))
    for ar, ac, br, bc, cr, cc in groups:
        bw = b[br:br + n, bc:bc + k].T if tb else b[br:br + k, bc:bc + n]
        out[cr:cr + m, cc:cc + n] = a[ar:ar + m, ac:ac + k] @ bw
    return out * op.attr("scale", 1.0)


def gelu(x, approx: str):
    if approx == "erf":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))))


def layernorm(x, gamma, beta, eps):
    mu = x.mean(1, keepdims=True)
    var = ((x - mu) ** 2).mean(1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def softmax(x, scale, valid=0):
    """Row softmax over the first `valid` columns (0 = all); masked columns are 0."""
    v = valid or x.shape[1]
    out = np.zeros_like(x)
    e = np.multiply(x[:, :v], scale, out=out[:, :v])      # in place: S is the biggest tensor
    e -= e.max(1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(1, keepdims=True)
    return out


def _op(op, x, rnd):
    """One op in float64; `rnd` rounds the intermediates a composite op stores."""
    if op.kind == "matmul":
        return matmul(op, *x)
    if op.kind == "gelu":
        return gelu(x[0], op.attr("approx", "tanh"))
    if op.kind == "add":
        return x[0] + x[1]
    if op.kind == "bias":      # x + b, b a [1, cols] row broadcast over the rows
        return x[0] + x[1]
    if op.kind == "cast":    # to FP8 e4m3 with the output's per-tensor scale, saturating
        q = np.clip(x[0] / op.attr("scale"), -FP8_MAX, FP8_MAX)
        return q.astype(FP8).astype(np.float64) * op.attr("scale")
    if op.kind == "layernorm":
        return layernorm(x[0], x[1], x[2], op.attr("eps", 1e-6))
    if op.kind == "softmax":
        return softmax(x[0], op.attr("scale", 1.0), op.attr("valid", 0))
    if op.kind == "flash_attention":   # the same function as materialized attention
        q, k, v = x
        d, v_ = op.attr("head_dim"), op.attr("valid")
        out = np.zeros_like(q)
        for h in range(op.attr("heads")):
            c = slice(h * d, (h + 1) * d)
            p = rnd(softmax(rnd(q[:, c] @ k[:, c].T * op.attr("scale")), 1.0, v_))
            out[:, c] = p @ v[:, c]
        return out
    raise NotImplementedError(f"reference: op {op.kind!r}")


def evaluate(g: Graph, data: dict, round_f16: bool = True) -> dict[str, np.ndarray]:
    """Every tensor's value; with a Repeat, the body runs once per member of its
    sequences and carried outputs feed the next iteration's inputs."""
    rep = g.repeat
    seq = set(rep.sequences) if rep else set()
    env = {n: _value(g, data, n) for n in data if n not in seq}
    rnd = (lambda a: a.astype(np.float16).astype(np.float64)) if round_f16 else (lambda a: a)

    def ops(a, b):
        for op in g.ops[a:b]:
            y = _op(op, [env[n] for n in op.inputs], rnd)
            env[op.outputs[0]] = rnd(y) if g.tensors[op.outputs[0]].dtype == "f16" else y

    first, stop = g.body()
    ops(0, first)                         # ops before the Repeat body run once
    for i in range(rep.count if rep else 1):
        for n in seq:
            env[n] = data[n][i].astype(np.float64) * g.tensors[n].scale
        ops(first, stop)
        if rep and i + 1 < rep.count:
            for out, inp in rep.carried:
                env[inp] = env[out]
    ops(stop, len(g.ops))                 # and those after it once, after
    return env


def outputs(g: Graph, env: dict) -> dict[str, np.ndarray]:
    return {t.name: env[t.name].astype(np.float16) for t in g.of_kind("output")}


def run(g: Graph, data: dict) -> dict[str, np.ndarray]:
    return outputs(g, evaluate(g, data))


def reference_and_tolerance(g: Graph, data: dict) -> tuple[dict, float]:
    """The outputs and the max abs error allowed on any output element.

    One matmul: the device rounds to f16 at most twice (per-tile partials, then the
    reduced sum) and the reference once; each rounding of a partial sum of a·b terms
    errs by at most u·Σ|a||b| (u = 2^-11), so 3u·max(|A|·|B|) bounds the difference.
    Longer graphs: rounding noise is amplified by the ops after it, which the data
    shows directly: twice the largest difference between the f16-rounded and the
    unrounded float64 evaluations, plus that matmul bound for the last op."""
    env = evaluate(g, data)
    worst = 0.0
    last = g.ops[-1]
    if last.kind == "matmul":
        a, b = (np.abs(env[n]) for n in last.inputs)
        worst = 3 * F16_UNIT * float(matmul(last, a, b).max())
    if len(g.ops) > 1 or g.repeat or last.kind != "matmul":
        exact = evaluate(g, data, round_f16=False)
        worst += 2 * max(float(np.abs(env[t.name] - exact[t.name]).max()) for t in g.of_kind("output"))
    return outputs(g, env), worst


def tolerance(g: Graph, data: dict) -> float:
    return reference_and_tolerance(g, data)[1]

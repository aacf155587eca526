"""Golden numpy execution of a graph, and the tolerance the compiled program is held to.

The reference follows the graph's semantics: every op computes on the dequantized
inputs and its output is rounded to the tensor's dtype (f16), as the device stores it.
The device may still differ by rounding-level noise (f32 accumulation order, k-split
partials rounded to f16, transcendental kernels), which later ops propagate; the
tolerance bounds that from the data itself.

The arithmetic of each op (f16 rounding, the exact dot, GELU, layernorm, softmax, the FP8
lookup) and why it gives the same bits on every machine: compiler/reference_ops.py. This
file is what applies it to a graph: a tensor's value as the device holds it, one op, the
evaluation (Repeat iterations, dropping dead activations, two evaluations sharing sequence
members), and the tolerance.
The unrounded evaluation (round_f16=False) uses the same arithmetic: it measures the f16
rounding noise (units of 2^-11). Cost: the reference takes 2-2.7x as long as
with float32 BLAS (float64 products: experiments/determinism/README.md).

The file reads top-down: sequence members' values (_value, _Shared between the
evaluations); _op (one op); evaluate; reference_and_tolerance. Comparing outputs (real
rows, rms error, the same model with FP16 activations): compiler/compare.py.

What is only faster (issue 13, round 5; none of it changes an operation or its order): the
two evaluations widen each FP8 weight member once between them (`_Shared`); the rest is
reference_ops.py's."""
from __future__ import annotations

import math
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import numpy as np
from threadpoolctl import threadpool_limits

from .ir import Graph, member
from .models.gemm import FP8, FP8_MAX
from .reference_ops import _lookup, _round_fresh, dot, gelu, layernorm, matmul, row_normalised, softmax

F16_UNIT = 2.0 ** -11   # unit roundoff of float16
MARGIN = 2.0            # reference_and_tolerance's factor on the measured rounding difference


def _value(g: Graph, data: dict, name: str, i: int | None = None) -> np.ndarray:
    """A tensor's value as the device holds it (member i of a sequence, with member i's
    scale), in float32: FP8 through a 256-entry table of code x scale (one float32
    rounding of the product, <= 2^-24, as in the error bound above); f16 exactly."""
    stored = np.asarray(data[name] if i is None else data[name][i])    # also a lazy file-backed array
    scale = g.tensors[name].scale if i is None else member(g.tensors[name].scale, i)
    if stored.dtype == FP8:
        table = np.arange(256, dtype=np.uint8).view(FP8).astype(np.float32) * np.float32(scale)
        out = np.empty(stored.shape, np.float32)
        _lookup(np.ascontiguousarray(stored).view(np.uint8).reshape(-1), table, out.reshape(-1))
        return out
    return stored.astype(np.float32) * scale


class _Shared:
    """Sequence members (27 layers of FP8 weights: 0.4 G table lookups and 390 MB read per
    evaluation) that two concurrent evaluations both read: the first to ask makes the value
    and leaves it, read-only, for the second, which takes it away. If the second asks while
    the first is still making it, it makes its own (the same bits: _value is deterministic).
    At most `cap` bytes wait (the evaluation ahead stops leaving values once its lead is that
    large), so the two evaluations together hold at most that much more than apart."""
    PENDING, NONE = object(), object()    # the first is making it; the first kept none

    def __init__(self, cap: int = 256 << 20):
        self.lock, self.vals, self.cap, self.held = threading.Lock(), {}, cap, 0

    def value(self, g: Graph, data: dict, name: str, i: int) -> np.ndarray:
        key = (name, i)
        with self.lock:
            v = self.vals.pop(key, None)
            if isinstance(v, np.ndarray):
                self.held -= v.nbytes
                return v
            if v is None:                 # first: the other evaluation will want it
                self.vals[key] = self.PENDING
        v = _value(g, data, name, i)
        with self.lock:
            if self.vals.get(key) is self.PENDING:     # (else the second came meanwhile: made its own)
                if self.held + v.nbytes <= self.cap:
                    v.flags.writeable = False        # two evaluations' envs hold it: nobody rounds it in place
                    self.vals[key], self.held = v, self.held + v.nbytes
                else:
                    self.vals[key] = self.NONE       # the second makes its own, and keeps nothing
        return v


def _op(op, x, rnd, f16: bool = False):
    """One op, in its inputs' float width; `rnd` rounds the intermediates a composite op stores;
    `f16`: its output rounded to f16 (matmul and softmax do it a cache-sized block at a time)."""
    if op.kind == "matmul":
        if op.attr("normalise"):          # p·v of a deferred softmax (policy.deferred_norm)
            y = row_normalised(op, matmul(op, *x), x[0])
            return _round_fresh(y) if f16 else y
        return matmul(op, *x, f16=f16)
    if op.kind == "softmax":
        return softmax(x[0], op.attr("scale", 1.0), op.attr("valid", 0), f16=f16, deferred=op.attr("deferred", False))
    y = _op_value(op, x, rnd)
    return _round_fresh(y) if f16 else y


def _op_value(op, x, rnd):
    """The ops other than matmul and softmax (which _op runs itself)."""
    if op.kind == "gelu":
        return gelu(x[0], op.attr("approx", "tanh"))
    if op.kind == "add":
        return x[0] + x[1]
    if op.kind == "bias":      # x + b, b a [1, cols] row broadcast over the rows
        return x[0] + x[1]
    if op.kind == "cast":    # to FP8 e4m3 with the output's per-tensor scale, saturating
        q = np.clip(x[0] / op.attr("scale"), -FP8_MAX, FP8_MAX)
        return q.astype(FP8).astype(x[0].dtype) * op.attr("scale")
    if op.kind == "layernorm":
        return layernorm(x[0], x[1], x[2], op.attr("eps", 1e-6))
    if op.kind == "flash_attention":   # the same function as materialized attention
        q, k, v = x
        d, v_, H = op.attr("head_dim"), op.attr("valid"), op.attr("heads")
        out = np.zeros((q.shape[0], H * d), q.dtype)
        for r, cq, ck, cv, co in flash_groups(op):
            p = rnd(softmax(rnd(dot(q[r, cq], k[r, ck].T) * op.attr("scale")), 1.0, v_))
            out[r, co] = dot(p, v[r, cv])
        return out
    raise NotImplementedError(f"reference: op {op.kind!r}")


def flash_groups(op):
    """A flash_attention op's (image, head) groups: (rows, Q cols, K cols, V cols, output
    cols) slices; image b's tokens are rows [b·T, (b+1)·T), head h at `cols`[i] + h·d."""
    T, H, d = op.attr("tokens"), op.attr("heads"), op.attr("head_dim")
    cols = op.attr("cols", (0, 0, 0))
    return [(slice(b * T, (b + 1) * T), *(slice(c0 + h * d, c0 + (h + 1) * d) for c0 in (*cols, 0)))
            for b in range(op.attr("batch", 1)) for h in range(H)]


def _dead_after(g: Graph, first: int, stop: int, keep: set) -> dict[int, list[str]]:
    """op index -> the activations no later op reads: the last reader within the op's
    segment (before the Repeat body, the body, after it), for tensors that segment makes
    and nothing outside it reads (a body tensor is remade every iteration)."""
    rep = g.repeat
    keep = set(keep) | {n for pair in (rep.carried if rep else ()) for n in pair}
    free: dict[int, list[str]] = {}
    for a, b in ((0, first), (first, stop), (stop, len(g.ops))):
        made = {n for op in g.ops[a:b] for n in op.outputs}
        outside = {n for j, op in enumerate(g.ops) if not a <= j < b for n in op.inputs}
        last = {}
        for j in range(a, b):
            for n in g.ops[j].inputs:
                last[n] = j
        for n, j in last.items():
            if n in made and n not in keep and n not in outside:
                free.setdefault(j, []).append(n)
    return free


def evaluate(g: Graph, data: dict, round_f16: bool = True, keep: set | None = None,
             rewrite=None, shared: _Shared | None = None) -> dict[str, np.ndarray]:
    """Every tensor's value; with a Repeat, the body runs once per member of its
    sequences and carried outputs feed the next iteration's inputs. With `keep`, only
    those tensors (and inputs/parameters) are returned: every other activation is
    dropped after its last reader (two evaluations of 27 So400m layers held every
    activation of a layer, ~0.5 GB each). `rewrite(j, op, i, env)`, if given, returns
    the op that runs in place of op j in iteration i (calibration sets cast scales).
    `shared`: where two concurrent evaluations of the same data take sequence members."""
    rep = g.repeat
    seq = set(rep.sequences) if rep else set()
    env = {n: _value(g, data, n) for n in data if n in g.tensors and n not in seq}   # not compare.ORIGINAL's
    rnd = _round_fresh if round_f16 else (lambda a: a)      # rnd only ever sees an op's fresh result
    first, stop = g.body()
    free = _dead_after(g, first, stop, keep) if keep is not None else {}

    def ops(a, b, i=0):
        for j in range(a, b):
            op = g.ops[j].at(i)           # per-iteration scales (a Repeat body's casts)
            if rewrite is not None:
                op = rewrite(j, op, i, env)
            env[op.outputs[0]] = _op(op, [env[n] for n in op.inputs], rnd,
                                     round_f16 and g.tensors[op.outputs[0]].dtype == "f16")
            for n in free.get(j, ()):
                del env[n]

    ops(0, first)                         # ops before the Repeat body run once
    for i in range(rep.count if rep else 1):
        for n in seq:
            env[n] = shared.value(g, data, n, i) if shared is not None else _value(g, data, n, i)
        ops(first, stop, i)
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
    reduced sum; once with policy.f32_partials, whose partials stay f32, so the bound
    holds for both) and the reference once; each rounding of a partial sum of a·b terms
    errs by at most u·Σ|a||b| (u = 2^-11), so 3u·max(|A|·|B|) bounds the difference.
    Longer graphs: rounding noise is amplified by the ops after it, which the data
    shows directly: twice the largest difference between the f16-rounded and the
    unrounded evaluations, plus that matmul bound for the last op, plus one f16 unit in
    the last place of the largest output: the device and the reference each round their
    outputs to f16 last, so values within d of each other before that rounding are stored
    up to d + ulp apart (seen: ViT-B/16's logits for two images on the tiny target, device
    0.0078 off where twice the noise was 0.0076: test_tower.py::test_batch_of_images)."""
    last = g.ops[-1]
    noise = len(g.ops) > 1 or g.repeat or last.kind != "matmul"
    # the two evaluations are independent: one thread each, BLAS single-threaded in both (two
    # BLAS thread pools on 2 cores would oversubscribe them); numpy releases the GIL in BLAS
    # and numba in its loops, so on 2 cores this takes about the time of one evaluation
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(2 if noise else 1) as pool:
        keep = {t.name for t in g.of_kind("output")} | set(last.inputs)
        shared = _Shared() if noise else None
        fut = [pool.submit(evaluate, g, data, r, keep, None, shared) for r in ((True, False) if noise else (True,))]
        wait(fut, return_when=FIRST_COMPLETED)
        # the other evaluation goes on alone (the rounded one does more): its BLAS may use both
        # cores now (no bit depends on BLAS's threads: exact.matmul_f32)
        threadpool_limits(2, user_api="blas")
        env, unrounded = fut[0].result(), fut[-1].result()
    return outputs(g, env), output_tolerance(g, env, [unrounded] if noise else [])


def output_tolerance(g: Graph, env: dict, others: list, margin: float = MARGIN, last_unit: bool = True) -> float:
    """The rule of reference_and_tolerance's docstring, for the rounded evaluation `env`:
    the final matmul's rounding bound, plus `margin` x the largest difference between `env`'s
    outputs and those of any evaluation in `others` (the unrounded one; with FP8 activations
    also nudged twins, compiler/tolerance.py), plus (`last_unit`) one f16 unit of the largest
    output."""
    last, outs = g.ops[-1], [t.name for t in g.of_kind("output")]
    worst = 0.0
    if last.kind == "matmul":
        a, b = (np.abs(env[n]) for n in last.inputs)
        worst = 3 * F16_UNIT * float(matmul(last, a, b).max())
    if others:
        diff = max(max(float(np.abs(env[n] - e[n]).max()) for n in outs) for e in others)
        worst += margin * diff + (last_rounding(env, outs) if last_unit else 0.0)
    return worst


def last_rounding(env: dict, outs) -> float:
    """One f16 unit in the last place of the largest output (reference_and_tolerance)."""
    top = max(float(np.abs(env[n]).max()) for n in outs)
    return float(np.spacing(np.float16(top), dtype=np.float16)) if np.isfinite(top) else math.inf


def tolerance(g: Graph, data: dict) -> float:
    return reference_and_tolerance(g, data)[1]

"""Every scale for each FP8 cast, one cast at a time: how much any per-tensor scale could
lower the cast's own error, on the trial's own activations (the most an oracle scale could
give; no trial may look at its input this way).

    python experiments/fp8_scales/scan.py [--layers 2] [--steps 16]

Evaluates the model's reference (static per-layer bounds, `model.fp8_scales=bound`) once,
keeping each cast's input per layer, then rounds that input alone to e4m3 with the static
bound's scale divided by 2^f for `steps` values of f in [0, 1) (one binade: e4m3's relative
grid repeats every binade, so every scale is one of these times a power of two, and powers
below the bound only push data into subnormals), and with the tensor's own amax / 448.
Then both again rounded up to a power of two, as Graphcore's FP8 scales are (an integer
log2 scale: graphcore/popart willow/src/util/float8util.cpp): on one grid, the two differ
only in the elements the static bound pushes into subnormals.
Finally finer scales than the issue's per tensor: each row's (token's) own amax, and each
column's (channel's), also rounded up to powers of two (what folding a column's scale into
the next matmul's FP8 weights leaves exact).
Prints per cast and layer: the bound over the amax, the rms relative error of the rounded
input for the bound, the amax, the best and the worst of the scanned scales, the bound and
the amax as powers of two, the share of elements below e4m3's smallest normal (2^-6)
under the bound, and the per-row and per-column amax (and the latter as powers of two)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compiler import reference  # noqa: E402
from compiler.models import vit  # noqa: E402
from compiler.models.gemm import FP8, FP8_MAX  # noqa: E402


def arg(argv, name, default):
    return argv[argv.index(name) + 1] if name in argv else default


def rms_rel(x, scale):
    """rms relative error of x rounded to e4m3 with `scale` (a number, or per row [R, 1]
    or per column [1, C])."""
    q = np.clip(x / scale, -FP8_MAX, FP8_MAX).astype(FP8).astype(np.float64) * scale
    return float(np.sqrt(((q - x) ** 2).sum() / (x ** 2).sum()))


def pow2(scale):
    """The smallest power of two >= scale (a log2 scale that never clips more than scale)."""
    return float(2.0 ** np.ceil(np.log2(scale)))


def main(argv):
    layers, steps = int(arg(argv, "--layers", 2)), int(arg(argv, "--steps", 16))
    g, data = vit.build(dict(name="vit", preset="so400m", scope="tower", layers=layers, seed=0,
                             fp8_activations=True, fp8_scales="bound"))
    seen = {}

    def keep(n, op, i, env):
        if op.kind == "cast":
            x = np.asarray(env[op.inputs[0]], np.float64)
            seen[(op.outputs[0], i)] = (x[np.any(x != 0, axis=1)], op.attr("scale"))
        return op

    reference.evaluate(g, data, rewrite=keep)
    print(f"so400m tower, {layers} layers, {steps} scales per binade; rms relative error of the cast alone")
    print("| cast | layer | bound / amax | static bound | own amax | best scanned | worst scanned "
          "| bound, 2^k | amax, 2^k | subnormal under bound | per-row amax | per-column amax | per-column, 2^k |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (name, i), (x, s) in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        amax = float(np.abs(x).max()) / FP8_MAX
        e = [rms_rel(x, s / 2 ** (j / steps)) for j in range(steps)]
        sp, ap = pow2(s), pow2(amax)
        sub = float((np.abs(x) < 2.0 ** -6 * sp).mean())
        rows, cols = (np.abs(x).max(a, keepdims=True) / FP8_MAX for a in (1, 0))
        cols = np.where(cols > 0, cols, 1)
        print(f"| {name} | {i} | {s / amax:.1f} | {e[0]:.3%} | {rms_rel(x, amax):.3%} | {min(e):.3%} | {max(e):.3%} "
              f"| {rms_rel(x, sp):.4%} | {rms_rel(x, ap):.4%} | {sub:.2%} | {rms_rel(x, rows):.3%} "
              f"| {rms_rel(x, cols):.3%} | {rms_rel(x, 2.0 ** np.ceil(np.log2(cols))):.4%} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

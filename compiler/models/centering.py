"""FP8 cast inputs centred per channel on calibration data (model.fp8_centering).

Why: e4m3's error is relative to the value it rounds, and a ViT block's LayerNorm outputs
carry a large per-channel part common to every token. Subtracting each channel's mean
before the cast, and adding it back exactly through the next matmul's bias, leaves the cast
only the token-to-token part to round: smaller, so its absolute errors are smaller. At 27
layers the outputs' rms error against FP16 activations falls 9.3 ± 0.5 % below the static
bounds' over 16 seeds, on every seed; 7.5 ± 0.2 % at 4 layers (experiments/fp8_scales; those
figures: seeded noise images for both calibration and trial). On held-out photos, calibrated
on the CALIBRATION photos: experiments/fp8_scales/README.md.

Free on the device: each offset folds into parameters the block already has, so the graph,
its ops and cycles do not change (centring runs only on the host, at build time):
- ln1, QKV's input, = γ⊙z + β: β1 -= m1 and QKV's bias += m1·W_qkv;
- ln2, fc1's input: β2 -= m2 and fc1's bias += m2·W_fc1;
- attn, proj's input (model.fp8_centering=norms+attn only): its rows are convex combinations
  of V's rows (softmax rows sum to 1), so V's bias -= m_a moves them by -m_a; proj's bias
  += m_a·W_proj. Not the default: the attention output's common part is the image's own,
  so a new image's attn, less the calibration image's mean, leaves a part the scale fitted to
  the centred calibration data does not hold, and the cast clips (noise images, 27 layers,
  seed 0: up to 9.9× its range; 4.93 % rms against the static bounds' 4.03 %; the norms
  alone 3.77 %). By default the attention output's cast is kept in f16 instead
  (model.fp8_fallback, calibrate.py).
GELU's output (fc2's input) has no parameter to fold into and is cast as it is. In exact
arithmetic the model is the same function; each changed parameter is rounded to f16 once.
m is per layer and channel: the mean over the real rows of the calibration inputs (the
CALIBRATION photos for a tower; never the trial's input), evaluated with FP16 activations. The parameters as given stay in the data under
compare.ORIGINAL + name: the trial's error is measured against the model as given."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, member

# cast input -> (LayerNorm bias it comes from, or None; the matmul weight and bias reading it)
FOLDS = {"ln1": ("norm1.bias", "attn.qkv.weight", "attn.qkv.bias"),
         "attn": (None, "attn.proj.weight", "attn.proj.bias"),
         "ln2": ("norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias")}
V_BIAS = "attn.qkv.bias"      # its last third is V's: attn's offset is taken out of it
NORMS = ("ln1", "ln2")        # model.fp8_centering=norms (the default): see the module docstring


def channel_means(g: Graph, data: dict, samples: list[dict], casts=tuple(FOLDS)) -> dict[str, np.ndarray]:
    """{cast input: float64 [count, cols]} for `casts` (of FOLDS): per Repeat iteration, the
    mean of each column over the real rows of every sample, the model evaluated with FP16
    activations."""
    from .. import reference     # here (and compare, which imports it): every stage imports
    from ..compare import real_rows, without_casts     # the models, few need numba's start-up
    h = without_casts(g)
    L = g.repeat.count if g.repeat else 1
    first, stop = h.body()
    readers = {}                 # body op -> tracked tensors it is the first to read
    for n in casts:
        j = next(j for j in range(first, stop) if n in h.ops[j].inputs)
        readers.setdefault(j, []).append(n)
    keep = {n: real_rows(g, n) for n in casts}
    total = {n: np.zeros((L, g.tensors[n].shape[1])) for n in casts}

    def rewrite(j, op, i, env):
        for n in readers.get(j, ()):
            total[n][i] += env[n][keep[n]].astype(np.float64).sum(0)
        return op

    for inputs in samples:
        reference.evaluate(h, {**data, **inputs}, rewrite=rewrite)
    return {n: t / (keep[n].sum() * len(samples)) for n, t in total.items()}


def center(g: Graph, data: dict, samples: list[dict], casts=NORMS) -> dict[str, np.ndarray]:
    """Fold the calibration means of the inputs of `casts` (of FOLDS) into the parameters
    (module docstring), keeping each changed parameter as given under ORIGINAL + name;
    returns the means."""
    from .. import exact          # here: the config check imports NORMS from this module, and
    from ..compare import ORIGINAL      # needs neither numba's start-up nor ml_dtypes (gemm)
    from .gemm import dequantize
    means = channel_means(g, data, samples, casts)
    width = g.tensors["attn"].shape[1]
    changed = sorted({n for x in casts for n in (FOLDS[x][0], FOLDS[x][2], V_BIAS if x == "attn" else None) if n})
    assert all(data[n].dtype == np.float16 for n in changed)      # f16 biases: stored as their values
    val = {n: np.asarray(data[n], np.float64) for n in changed}   # [count, 1, cols]
    for i in range(g.repeat.count if g.repeat else 1):
        for x in casts:
            beta, w, b = FOLDS[x]
            m = means[x][i]
            if beta:
                val[beta][i] -= m
            else:                                   # attn: V's bias
                val[V_BIAS][i][..., 2 * width:] -= m
            # in a fixed order, not BLAS's (its sums vary by CPU, and these biases are stored: issue #24)
            val[b][i] += exact.matmul64_ordered(m, dequantize(np.asarray(data[w][i]), member(g.tensors[w].scale, i)))
    for n in changed:
        data[ORIGINAL + n] = data[n]
        data[n] = val[n].astype(np.float16)
    return means

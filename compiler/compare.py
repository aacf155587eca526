"""Comparing a graph's outputs with others: the rows that hold real tokens, the rms error
over them, and the same model with FP16 activations (what FP8 activations cost, which the
reference phase and the run report)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import reference
from .ir import Graph

# data[ORIGINAL + name]: parameter `name` as the model gives it, where data[name] was changed
# for FP8 activations (models/centering.py); the comparison is with the model as given
ORIGINAL = "as_given:"


def without_casts(g: Graph) -> Graph:
    """The same model with FP16 activations: every cast op taken out and its readers reading
    its input (the Repeat's body range shifted to match)."""
    src = {op.outputs[0]: op.inputs[0] for op in g.ops if op.kind == "cast"}
    if not src:
        return g
    first, stop = g.body()
    kept = [j for j, op in enumerate(g.ops) if op.kind != "cast"]
    ops = [dataclasses.replace(g.ops[j], inputs=tuple(src.get(n, n) for n in g.ops[j].inputs)) for j in kept]
    rep = g.repeat
    if rep:
        before = lambda k: sum(j < k for j in kept)
        rep = dataclasses.replace(rep, first=before(first), stop=before(stop) if rep.stop else 0)
    return dataclasses.replace(g, ops=ops, repeat=rep, tensors={n: t for n, t in g.tensors.items() if n not in src})


def fp16_activations(g: Graph, data: dict) -> dict | None:
    """The outputs of the same model with FP16 activations (without_casts) and its
    parameters as given, f16-rounded as the device would store them; None if the graph
    casts no activation. What FP8 activations cost is measured against these."""
    h = without_casts(g)
    if h is g:
        return None
    given = {n[len(ORIGINAL):]: v for n, v in data.items() if n.startswith(ORIGINAL)}
    return reference.outputs(h, reference.evaluate(h, {**data, **given}, keep={t.name for t in h.of_kind("output")}))


def real_rows(g: Graph, name: str) -> np.ndarray:
    """Rows of tensor `name` that hold real tokens: a model pads odd token counts with a
    token its attention masks out (SOFTMAX / flash `valid` < keys); rows r of a tensor
    with a multiple of those keys as rows are real where r mod keys < valid."""
    rows = g.tensors[name].shape[0]
    keep = np.ones(rows, bool)
    for op in g.ops:
        valid = op.attr("valid", 0)
        if not valid or op.kind not in ("softmax", "flash_attention"):
            continue
        keys = op.attr("tokens") if op.kind == "flash_attention" else g.tensors[op.inputs[0]].shape[1]
        if keys and rows % keys == 0:
            keep &= np.arange(rows) % keys < valid
    return keep


def rms_rel_error(g: Graph, got: dict, want: dict) -> float:
    """rms of got - want over rms of want, all outputs' real rows together (inf if any
    difference is not finite). A stored figure (metrics), so its sums are exact (math.fsum
    of the float64 squares, each exactly rounded): no summation order, SIMD width or numpy
    build decides a bit of it."""
    sq_err, sq_ref = [], []
    for name, w in want.items():
        keep = real_rows(g, name)
        w = np.asarray(w)[keep].astype(np.float64)
        d = np.abs(np.asarray(got[name])[keep].astype(np.float64) - w)
        sq_err.append(math.fsum((d * d).ravel().tolist()) if np.isfinite(d).all() else math.inf)
        sq_ref.append(math.fsum((w * w).ravel().tolist()))
    e, r = math.fsum(sq_err), math.fsum(sq_ref)
    return math.sqrt(e / r) if r > 0 else (0.0 if e == 0 else math.inf)


def images(g: Graph) -> int:
    """Images a run of g takes (model.batch; 1 for a graph that is not a tower)."""
    return g.meta.get("images") or 1


def one_image(x: np.ndarray, b: int, images: int) -> np.ndarray:
    """Output x of a run of `images` images (rows image-major: image b's are the b-th
    of `images` equal row blocks) with every other image's rows zeroed, so that
    rms_rel_error over x's real rows counts image b's alone."""
    x = np.asarray(x)
    n = x.shape[0] // images
    out = np.zeros_like(x)
    out[b * n:(b + 1) * n] = x[b * n:(b + 1) * n]
    return out


def worst_image_error(g: Graph, got: dict, want: dict) -> float:
    """The largest rms_rel_error of one image of a batch (g.meta["images"]) over the
    outputs of `want`: a batch's figure averages its images, and could hide one."""
    B = images(g)
    return max(rms_rel_error(g, {n: one_image(got[n], b, B) for n in want},
                             {n: one_image(w, b, B) for n, w in want.items()}) for b in range(B))

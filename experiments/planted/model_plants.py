"""Model-definition plants (experiments/planted/plants.py's KINDS): each returns a context
in which compiler/models/vit.py builds a wrong graph -- monkeypatched, never edited. The trial
built inside it has a reference that agrees with the device (both come from the patched
graph), so only a check written from timm's definition can catch these."""
from __future__ import annotations

import contextlib

import numpy as np


@contextlib.contextmanager
def _patched(module, name, wrap):
    old = getattr(module, name)
    setattr(module, name, wrap(old))
    try:
        yield
    finally:
        setattr(module, name, old)


def _graph_ops(rewrite):
    """vit's Graph with op() rewritten: rewrite(kind, inputs, attrs) -> (inputs, attrs)."""
    from compiler.ir import Graph
    from compiler.models import vit

    class Planted(Graph):
        def op(self, kind, inputs, outputs, **attrs):
            inputs, attrs = rewrite(kind, list(inputs), dict(attrs))
            return super().op(kind, inputs, outputs, **attrs)
    return _patched(vit, "Graph", lambda old: Planted)


def attention_scale(cfg):
    """The attention softmax scaled by 1/sqrt(d+1) for timm's 1/sqrt(d)."""
    d = cfg["model"]["width"] // cfg["model"]["heads"]

    def rw(kind, inputs, attrs):
        if kind == "softmax" and inputs == ["scores"]:
            attrs["scale"] = 1 / np.sqrt(d + 1)
        return inputs, attrs
    return _graph_ops(rw)


def gelu_tanh(cfg):
    """GELU's tanh form where timm (SigLIP) uses erf."""
    def rw(kind, inputs, attrs):
        if kind == "gelu":
            attrs["approx"] = "tanh"
        return inputs, attrs
    return _graph_ops(rw)


def layernorm_eps(cfg):
    """LayerNorm eps 1e-2 for timm's 1e-6 (an eps large enough to matter at this width)."""
    def rw(kind, inputs, attrs):
        if kind == "layernorm":
            attrs["eps"] = 1e-2
        return inputs, attrs
    return _graph_ops(rw)


def qk_swapped(cfg):
    """Attention reads queries from K's columns and keys from Q's."""
    from compiler.models import vit

    def wrap(old):
        def attention_ops(g, q, k, v, out, *a, cols=(0, 0, 0), **kw):
            c = tuple(cols)
            return old(g, q, k, v, out, *a, cols=(c[1], c[0], *c[2:]), **kw)
        return attention_ops
    return _patched(vit, "attention_ops", wrap)


def missing_pos_embed(cfg):
    """The position embedding never added (its table zero)."""
    from compiler.models import vit

    def wrap(old):
        def patch_embedding(g, data, *a, **kw):
            out = old(g, data, *a, **kw)
            data["pos_embed"] = np.zeros_like(data["pos_embed"])
            return out
        return patch_embedding
    return _patched(vit, "patch_embedding", wrap)


def map_latent(cfg):
    """The MAP head's latent query not loaded (zero), so the pool attends with its bias only."""
    from compiler.models import vit

    def wrap(old):
        def head(g, data, c, d, w, *a, **kw):
            key = "attn_pool.latent"
            w2 = {n: (np.zeros_like(w[n]) if n == key else w[n]) for n in w} if key in w else w
            return old(g, data, c, d, w2, *a, **kw)
        return head
    return _patched(vit, "head", wrap)


def clipping_scale(cfg):
    """FP8: every activation cast's scale divided by 16 after calibration, so the casts
    saturate (clip) -- the device and the reference clip alike."""
    from compiler.models import vit

    def wrap(old):
        def fit(g, data, samples, headroom, *rest):
            out = old(g, data, samples, headroom, *rest)
            from compiler.models.calibrate import _set_scales
            per = {n: [s / 16 for s in (op.attr("scale") if isinstance(op.attr("scale"), tuple)
                                         else (op.attr("scale"),))]
                   for n, op in enumerate(g.ops) if op.kind == "cast"}
            return {**out, **_set_scales(g, per)}
        return fit
    return _patched(vit, "least_error_scales", wrap)

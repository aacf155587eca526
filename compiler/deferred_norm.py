"""policy.deferred_norm: a materialized attention's softmax leaves its rows unnormalised and
the p·v matmul after it divides its output rows by their sums (#26).

The graph's meaning is softmax(S)·V; the device's, with the flag, is the same product taken
as (exp(S - max)·V) / rowsum: the 1/sum then scales d output columns a head (So400m 72)
instead of every key (730). `defer` rewrites the two ops' attributes only (tensors, shapes
and op order unchanged): the softmax gets `deferred` (reference_ops.softmax without the
division; SOFTMAX isa.F_SM_DEFER writes the row sums beside it) and its matmul gets
`normalise` (reference_ops.row_normalised: rows divided by the sums of its a rows; expand
gathers the sums to the tiles that finish the output and runs ROWSCALE F_RECIP there).

Plan and expand see the rewritten graph (device_model, for one chip and a pod alike), and so does the
run's op-by-op read-back, told by the program (LowerResult.deferred_norm, set by expand):
each device op is checked against its own reference op. The reference phase and the
model-level checks keep the model's graph, so the deferred program is still held to the true
attention. A softmax qualifies when its only reader is a matmul taking it as `a`
whose every group reads whole rows of it (columns [0, k) with k = its width), and it is
not a graph output."""
from __future__ import annotations

import dataclasses

from .ir import Graph, Op


def _with(op: Op, **attrs) -> Op:
    return dataclasses.replace(op, attrs=tuple(sorted({**dict(op.attrs), **attrs}.items())))


def deferrable(g: Graph) -> list[tuple[int, int]]:
    """(softmax op, its p·v matmul op) pairs the flag rewrites."""
    out = []
    for n, op in enumerate(g.ops):
        if op.kind != "softmax" or op.attr("deferred"):
            continue
        p = op.outputs[0]
        readers = g.consumers(p)
        if len(readers) != 1 or g.tensors[p].kind != "act":
            continue
        mm = g.ops[readers[0]]
        cols = g.tensors[p].shape[1]
        groups = mm.attr("groups", ((0, 0, 0, 0, 0, 0),))
        if (mm.kind == "matmul" and mm.inputs[0] == p and mm.inputs[1] != p and mm.attr("k") == cols
                and all(gr[1] == 0 for gr in groups)):
            out.append((n, readers[0]))
    return out


def defer(g: Graph, on: bool) -> Graph:
    """The graph with its qualifying softmax / p·v pairs rewritten (policy.deferred_norm),
    or g itself when off or none qualifies."""
    pairs = deferrable(g) if on else []
    if not pairs:
        return g
    ops = list(g.ops)
    for s, m in pairs:
        ops[s], ops[m] = _with(ops[s], deferred=True), _with(ops[m], normalise=True)
    return dataclasses.replace(g, ops=ops)


def device_model(m, on: bool):
    """The model result `m` as the device computes it: its graph through `defer`; plan and
    expand read this one, the reference phase and the report the model's own graph."""
    g = defer(m.graph, on)
    return m if g is m.graph else dataclasses.replace(m, graph=g)

"""The stage split of a pipeline over chips, and each chip's sub-graph (DESIGN.md §7a).

A stage is a contiguous range of encoder layers (the Repeat's iterations); the ops before
the Repeat (patch embedding, positions) run on the first chip, those after it (final norm,
head) on the last. `choose` picks the layer counts per chip that minimise the slowest
stage's estimated cycles among the splits whose every stage's parameters fit the chip's
weight budget (pod.weight_budget × the chip's SRAM); ties go to the split listed first
(more layers on earlier chips). The estimate is the AMP's: every matmul's MACs over the
chip's tiles at its dtype's rate (Target.amp_macs_per_cycle) -- the same for each layer,
which is what a split needs; the chips' own compilers then cost them exactly.

`chip_model(model, split, k)` is chip k's ModelResult: the graph's ops of its stage, the
Repeat counting its layers, every sequence (and per-layer scale) sliced to them. The
activation crossing a boundary is the Repeat's carried tensor: an `output` of chip k (its
`y`) and an `input` of chip k+1 (its `x`), moved by the link (compiler/pod/link.py).
Nothing here reads the reference."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from ..ir import Graph, Op, Repeat
from ..result import Rejection
from ..target import Target
from .machine import Pod

MAX_SPLITS = 200_000      # compositions enumerated at most (27 layers over 4 chips: 2,925)


@dataclass(frozen=True)
class Split:
    layers: tuple            # encoder layers per chip
    cycles: tuple            # estimated AMP cycles per stage
    param_bytes: tuple       # parameter bytes per stage
    budget_bytes: int        # pod.weight_budget × one chip's SRAM
    considered: int          # splits enumerated
    rejected_memory: int     # ... whose largest stage's parameters exceed the budget

    def ranges(self) -> list[tuple[int, int]]:
        edges = np.cumsum((0,) + tuple(self.layers))
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]

    def metrics(self) -> dict:
        return {"layers": list(self.layers), "estimated_cycles": list(self.cycles),
                "param_bytes": list(self.param_bytes), "budget_bytes": self.budget_bytes,
                "considered": self.considered, "rejected_memory": self.rejected_memory}


def _macs(op: Op) -> int:
    if op.kind == "matmul":
        return op.attr("m") * op.attr("k") * op.attr("n") * max(1, len(op.attr("groups", ()) or ()))
    if op.kind == "flash_attention":     # Q·Kᵀ and P·V per head
        return 2 * op.attr("tokens") ** 2 * op.attr("heads") * op.attr("head_dim")
    return 0


def _cycles(g: Graph, ops, t: Target) -> float:
    out = 0.0
    for op in ops:
        if _macs(op):
            w = g.tensors[op.inputs[1]].dtype
            out += _macs(op) / (t.amp_macs_per_cycle[t.amp_dtype(w, g.tensors[op.inputs[0]].dtype)] * t.tiles)
    return out


def _params(g: Graph, ops, per_layer: bool) -> int:
    names = {n for op in ops for n in op.inputs if g.tensors[n].kind == "param"}
    seqs = set(g.repeat.sequences) if g.repeat else set()
    return sum(g.tensors[n].nbytes for n in names if (n in seqs) == per_layer)


def stage_figures(g: Graph, t: Target):
    """(per-layer cycles, pre cycles, post cycles, per-layer bytes, pre bytes, post bytes)."""
    first, stop = g.body()
    pre, body, post = g.ops[:first], g.ops[first:stop], g.ops[stop:]
    return (_cycles(g, body, t), _cycles(g, pre, t), _cycles(g, post, t),
            _params(g, body, True) + _params(g, body, False), _params(g, pre, False), _params(g, post, False))


def choose(g: Graph, t: Target, pod: Pod) -> Split | Rejection:
    if g.repeat is None or not g.repeat.carried:
        return Rejection("plan", "pod_graph", f"a pod pipelines the Repeat's layers over chips: graph {g.name} "
                         f"has no Repeat with a carried activation (use a one-chip target)")
    L, N = g.repeat.count, pod.chips
    if L < N:
        return Rejection("plan", "pod_layers", f"{L} encoder layers cannot fill {N} chips (one layer per chip "
                         f"at least)", {"layers": L, "chips": N})
    lc, pre_c, post_c, lb, pre_b, post_b = stage_figures(g, t)
    budget = int(pod.weight_budget * t.tiles * t.tile_bytes)
    if pod.layers:
        if sum(pod.layers) != L:
            return Rejection("plan", "pod_layers", f"target.pod.layers={list(pod.layers)} sums to "
                             f"{sum(pod.layers)}, the model has {L} layers", {"layers": L})
        splits = [tuple(pod.layers)]
    elif math.comb(L - 1, N - 1) > MAX_SPLITS:
        raise ValueError(f"target.pod: {math.comb(L - 1, N - 1)} splits of {L} layers over {N} chips "
                         f"is more than {MAX_SPLITS}; set target.pod.layers")
    else:           # every composition of L into N positive parts, most layers first on earlier chips
        splits = sorted((tuple(np.diff((0,) + cut + (L,)).tolist())
                         for cut in itertools.combinations(range(1, L), N - 1)), reverse=True)
    best, over = None, 0
    for s in splits:
        cyc = tuple(n * lc + (pre_c if k == 0 else 0) + (post_c if k == N - 1 else 0) for k, n in enumerate(s))
        byt = tuple(n * lb + (pre_b if k == 0 else 0) + (post_b if k == N - 1 else 0) for k, n in enumerate(s))
        if max(byt) > budget:
            over += 1
            continue
        if best is None or max(cyc) < max(best[1]):
            best = (s, cyc, byt)
    if best is None:
        need = min(max(n * lb + (pre_b if i == 0 else 0) + (post_b if i == N - 1 else 0) for i, n in enumerate(s))
                   for s in splits)
        return Rejection("plan", "pod_memory", f"no split of {L} layers over {N} chips keeps every stage's "
                         f"parameters within target.pod.weight_budget ({budget} B of a chip): the best "
                         f"needs {need} B ({lb} B per layer)",
                         {"layers": L, "chips": N, "live_bytes": need, "available_bytes": budget,
                          "deficit_bytes": need - budget})
    s, cyc, byt = best
    return Split(s, tuple(round(c) for c in cyc), byt, budget, len(splits), over)


def _cut(v, a: int, b: int):
    """A per-layer scale (a tuple, one per iteration: ir.member) cut to layers [a, b); a scalar as it is."""
    return v[a:b] if isinstance(v, tuple) else v


class Members:
    """Layers [a, b) of a stacked sequence, read when used (a lazily loaded codec.FileArray
    stays lazy: member i reads the file's member a + i alone)."""

    def __init__(self, src, a: int, b: int):
        self.src, self.a, self.b = src, a, b
        self.shape = (b - a, *src.shape[1:])
        self.dtype, self.ndim = src.dtype, src.ndim

    def __len__(self):
        return self.b - self.a

    @property
    def nbytes(self):
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def __getitem__(self, i):
        if isinstance(i, (int, np.integer)):
            if not -len(self) <= i < len(self):
                raise IndexError(f"member {i} of {len(self)}")
            return self.src[self.a + int(i) % len(self)]
        return np.asarray(self)[i]

    def __array__(self, dtype=None, copy=None):
        a = np.stack([np.asarray(self.src[i]) for i in range(self.a, self.b)])
        return a if dtype is None else a.astype(dtype)

    def __reduce__(self):          # pickled (a store digest, a Dask task) as its source and range
        return Members, (self.src, self.a, self.b)


def chip_graph(g: Graph, a: int, b: int, first_chip: bool, last_chip: bool, k: int) -> Graph:
    rep = g.repeat
    first, stop = g.body()
    idx = [*(range(first) if first_chip else ()), *range(first, stop), *(range(stop, len(g.ops)) if last_chip else ())]
    (y, x), = rep.carried
    body = {n for op in g.ops[first:stop] for n in (*op.inputs, *op.outputs)}
    names = {n for i in idx for n in (*g.ops[i].inputs, *g.ops[i].outputs)}
    h = Graph(f"{g.name}_chip{k}", meta={m: v for m, v in g.meta.items() if m not in ("timm", "images")})
    for n, t in g.tensors.items():
        if n in names:
            kind = "input" if n == x and not first_chip else "output" if n == y and not last_chip else t.kind
            h.add(replace(t, kind=kind, scale=_cut(t.scale, a, b) if n in body else t.scale))
    for i in idx:
        op = g.ops[i]
        attrs = tuple((key, _cut(v, a, b) if key == "scale" else v) for key, v in op.attrs)
        h.ops.append(Op(op.kind, op.inputs, op.outputs, attrs) if first <= i < stop else op)
    f = first if first_chip else 0
    h.repeat = Repeat(b - a, rep.carried, rep.sequences, f, f + stop - first)
    return h


def chip_model(model, split: Split, k: int):
    """Chip k's ModelResult (compiler.phases.ModelResult, the same type as `model`): its stage's graph and data."""
    g, N = model.graph, len(split.layers)
    a, b = split.ranges()[k]
    h = chip_graph(g, a, b, k == 0, k == N - 1, k)
    seqs = set(g.repeat.sequences)
    data = {n: (Members(v, a, b) if n in seqs else v) for n, v in model.data.items() if n in h.tensors}
    if k > 0:       # the link delivers it at run time (pod/run.py); a placeholder of the right shape till then
        (_, x), = g.repeat.carried
        t = h.tensors[x]
        data[x] = np.zeros(t.shape, np.float16)
    return replace(model, graph=h, data=data)

"""Graph -> tile graph: walk the ops in order, keeping each tensor's layout.

Each op first gathers what it needs (one exchange superstep for all its gathers),
then runs its kernels (a compute superstep, shared with the previous op's when no
exchange came between). Inputs and parameters start in their homes (plan/homes.py):
whole rows spread evenly over the tiles, or for FP8 weights whole micro-panel spans
(the order their MATMUL reads, sent so by the host), each tensor rotated to balance
the fullest tile (policy.home_rotation); vectors in 256-byte shards (policy.vector_homes), each held once
where one multicast reaches every consumer (policy.single_vector_homes), else replicated so that broadcasting
them to every row tile costs no home tile more than a consumer receives; weights a candidate
keeps resident sit where their matmul reads them instead (matmul.py, with the matmuls).
"""
from __future__ import annotations

import numpy as np

from .. import isa
from ..plan.homes import home_blocks, home_grid, panel_weights, spread, starts
from ..plan.matmul import OUT_BYTES
from ..target import DTYPE_BYTES, STANDARD, Target
from .layout import Layout, allocate, blocks, convert, fill, gather, host_rects, like, pad
from .flash import expand_flash
from .matmul import expand_matmul, resident_stationary, resident_weights
from .balance import fixed_load, vector_load, vector_replicas, vector_rotation, vector_shards, vector_tiles
from .early import early_gathers
from .split import split_gathers
from .lnhalves import expand_ln_halves
from .ring import ring_homes, ring_weights
from ..plan.rowcalls import row_quantum, split_blocks
from .tilegraph import DUMP, END, Builder, TileGraph, concat, soa

F16 = isa.DTYPES["f16"]


class Ctx:
    def __init__(self, graph, target: Target, policy):
        self.g, self.t, self.policy = graph, target, policy
        self.bld = Builder(target.tiles)
        self.kinds: list[str] = []
        self.lay: dict[str, Layout] = {}
        self.vectors: dict[str, Layout] = {}          # vector homes: replica r = row r
        self.exchanged_at: dict[str, int] = {}        # matmul output -> its operand exchange step
        self.op = -1                                   # index of the op being expanded
        self.count, self.seq = 1, set()                # Repeat count and its sequences
        self.stationary: dict[str, int] = {}           # weight -> host stream: resident where read
        self.resident: dict[int, tuple] = {}           # matmul op -> its b blocks in the resident request
        self.panels = panel_weights(graph, target, policy.panel_homes)   # homes in micro-panel order
        self.in_panels: dict[str, tuple] = {}          # streams the host sends in panel order
        self.step_op: list[int] = []                   # op that opened each superstep
        self.fence = -1                                # a Repeat body edge: no compute step spans it
        self.dump: list[dict] = []                     # op outputs as completed (TileGraph.dump)
        self.done: dict[str, int] = {}                 # op output -> the step count when it is complete
        self.movable: list[tuple] = []                 # B gathers early_gathers may move (expand/early.py)
        self.ring_rows: dict[str, list] = {}           # ring copies: weight -> the layout each grid row gathers from
        self.ring_units: dict[str, dict] = {}          # 2-D unit pieces (expand/ring2d.py): weight -> unit grid
        self.ring_reps: dict[str, list] = {}           # ... and its replicas' layouts
        self.halves: frozenset = frozenset()           # LayerNorm ops over row halves (policy.ln_halves)
        self.sums: dict[str, Layout] = {}              # deferred softmax output -> its f32 row sums [rows, 1]
        self.carried: dict[str, str] = {}              # Repeat body output -> the body input it feeds

    # supersteps ---------------------------------------------------------------
    def exchange_step(self) -> int:
        self.kinds.append("exchange")
        self.step_op.append(self.op)
        return len(self.kinds)

    def compute_step(self) -> int:
        if not self.kinds or self.kinds[-1] != "compute" or self.fence == len(self.kinds):
            self.kinds.append("compute")
            self.step_op.append(self.op)
        return len(self.kinds)

    def kernel(self, **cols):
        self.bld.add("kern", **cols)

    def may_move(self, name: str, first: int, dst_rows, step: int):
        """Record the transfers added since bld.xfer[first] (a gather of `name` into
        requests dst_rows in `step`: a matmul's B, a bias slice, a LayerNorm's gamma and
        beta) for early_gathers: movable to any exchange step after `name` is complete
        (a parameter: any in the same Repeat body)."""
        if not (self.policy.early_gathers or self.policy.split_gathers):
            return
        t = self.g.tensors[name]
        if t.kind != "param" and name not in self.done:
            return
        ready = max(self.fence, self.done.get(name, 0))
        rows = lambda k: sum(len(ch["step"]) for ch in self.bld.xfer[:k])
        self.movable.append((rows(first), rows(len(self.bld.xfer)), np.asarray(dst_rows), step, ready))

    # homes --------------------------------------------------------------------
    def home(self, name: str, stream: int, rot: int, count: int = 1, resident: bool = False):
        """Whole rows over all tiles from tile `rot`; a sequence keeps its `count`
        members together in each home block, `istride` apart."""
        t = self.g.tensors[name]
        rows, cols = t.shape
        if rows == 1 and self.policy.vector_homes and t.kind == "param":
            return self.vector_home(name, stream, rot, count)
        P = self.panels.get(name, 0)
        if P:
            self.sent_in_panels(name, P)
        rs, cs, tiles = home_grid(rows, cols, self.t.tiles, P)
        self.lay[name] = self._home_layout(name, stream, rs, cs, (tiles + rot) % self.t.tiles, count, resident, P)

    def sent_in_panels(self, name: str, P: int):
        """The host sends input stream `name` in micro-panel order of height P."""
        t = self.g.tensors[name]
        self.in_panels[name] = (*t.shape, DTYPE_BYTES[t.dtype], P)

    def _home_layout(self, name, stream, rs, cs, tiles, count, resident, P=0, region=STANDARD) -> Layout:
        t = self.g.tensors[name]
        rows, cols = t.shape
        lay = allocate(self.bld, f"{name}.home", rows, cols, rs, cs, tiles, DTYPE_BYTES[t.dtype], 16, region, 0,
                       END if resident else 1, count, P)
        A, B, r, k = blocks(lay)
        r0, c0 = lay.rstart[A], lay.cstart[B]              # every member of every block, one call
        host_rects(self.bld, stream, t.shape, lay.ebytes, count, P, r0, r0 + r, c0, c0 + k, lay.req[A, B], 0,
                   lay.istride[A, B], r0, c0, k)
        return lay

    def vector_home(self, name: str, stream: int, rot: int, count: int):
        """A [1, C] parameter in shards of ~VECTOR_SHARD bytes, replicated so that each
        shard tile serves about as many bytes as a row tile receives (half the tiles
        consume it; each needs all S shards: R = ⌈(T/2)·shard / vector⌉ replicas; one
        with policy.single_vector_homes, expand/balance.py vector_shards).
        All R replicas in one request table and one host table (replica-major, as R
        separate homes would be: the same rows in the same order, without R rounds of
        Python per vector; 27 layers' vectors were half of expand's time)."""
        t, T = self.g.tensors[name], self.t.tiles
        cols, e = t.shape[1], DTYPE_BYTES[t.dtype]
        cs, R = vector_shards(cols, e, t.nbytes, T, vector_replicas(self.policy))
        S = len(cs)
        tiles = vector_tiles(S, R, rot, T)                   # [R, S]
        k = np.diff(np.append(cs, cols))                     # columns per shard
        size = k * e
        stride = -(-size // 16) * 16 if count > 1 else np.zeros(S, np.int64)
        req = self.bld.alloc_rows(f"{name}.home", tiles.ravel(), np.tile(size, R), 16, STANDARD, 0, END,
                                  count, np.tile(stride, R)).reshape(R, S)
        istride = np.broadcast_to(np.asarray(stride, np.int64), (R, S)).copy()
        # host rows (host_rects for a [1, C] stream, row-major): member i, replica r, shard j
        i = np.arange(count)[None, :, None]
        rep = lambda v: np.broadcast_to(v, (R, count, S)).ravel()
        self.bld.add("hin", stream=stream, host_off=rep(i * cols * e + cs * e), req=rep(req[:, None]),
                     off=rep(i * istride[:, None]), row_bytes=rep(size), rows=1, host_stride=cols * e,
                     tile_stride=rep(size))
        # replica r is row r of one [R, C] layout: gather_vector reads replica r as rows [r, r+1)
        self.vectors[name] = Layout(R, cols, np.arange(R), cs, tiles, req, e, istride=istride,
                                    name=f"{name}.home")
        self.lay[name] = Layout(1, cols, np.zeros(1, np.int64), cs, tiles[:1], req[:1], e,
                                istride=istride[:1], name=f"{name}.home")

    def gather_vector(self, name: str, step: int, tiles, req, off, c0=0, c1=None):
        """Columns [c0, c1) (default: all) of vector `name` into (req, off) on each of
        `tiles`, each from replica (its position mod R): one gather, replica-major."""
        t = self.g.tensors[name]
        e = DTYPE_BYTES[t.dtype]
        c1 = t.shape[1] if c1 is None else c1
        tiles, req, off, c0, c1 = np.broadcast_arrays(*(np.asarray(v) for v in (tiles, req, off, c0, c1)))
        if name not in self.vectors:
            gather(self.bld, self.lay[name], step, 0, 1, c0, c1, tiles, req, off, (c1 - c0) * e)
            return
        src = self.vectors[name]
        r = np.arange(len(tiles)) % src.rows
        o = np.argsort(r, kind="stable")
        gather(self.bld, src, step, r[o], r[o] + 1, c0[o], c1[o], tiles[o], req[o], off[o], (c1[o] - c0[o]) * e)


def expand_elementwise(c: Ctx, op):
    """GELU, or a cast to FP8 with the output tensor's scale, over the producer's blocks,
    in its layout."""
    src = c.lay[op.inputs[0]]
    y = c.g.tensors[op.outputs[0]]
    s = c.compute_step()
    out = like(c.bld, op.outputs[0], src, s, DTYPE_BYTES[y.dtype])
    A, B, r, k = blocks(src)
    if op.kind == "cast":
        sc, sseq = c.bld.scale_of(y.scale)                 # per layer: a table (tilegraph sseq)
        c.kernel(step=s, tile=src.tile[A, B], op=isa.CAST, dtype=isa.DTYPES[y.dtype] | F16 << 8,
                 r0=out.req[A, B], r1=src.req[A, B], o1=src.off[A, B], i0=r * k, scale=sc, sseq=sseq)
    else:
        flags = isa.F_ERF if op.attr("approx", "tanh") == "erf" else 0
        c.kernel(step=s, tile=src.tile[A, B], op=isa.GELU, dtype=F16 | flags << 16, r0=out.req[A, B],
                 r1=src.req[A, B], o1=src.off[A, B], i0=r * k)
    c.bld.reads(src, s)
    c.lay[op.outputs[0]] = out


def expand_bias(c: Ctx, op):
    """y = x + b over x's blocks; each block's slice of the bias row is gathered in the
    producer matmul's operand exchange when there is one (no superstep of its own)."""
    x, bname = c.lay[op.inputs[0]], op.inputs[1]
    A, B, r, k = blocks(x)
    tiles = x.tile[A, B]
    step = c.exchanged_at.get(op.inputs[0]) or c.exchange_step()
    buf = c.bld.alloc_rows(f"{op.outputs[0]}.bias", tiles, pad(k * 2, 8), 8, STANDARD, step)
    first = len(c.bld.xfer)
    c.gather_vector(bname, step, tiles, buf, 0, x.cstart[B], x.cstart[B] + k)
    c.may_move(bname, first, buf, step)
    s = c.compute_step()
    out = like(c.bld, op.outputs[0], x, s, OUT_BYTES)
    c.kernel(step=s, tile=tiles, op=isa.BIAS, dtype=F16, r0=out.req[A, B], r1=x.req[A, B], o1=x.off[A, B],
             r2=buf, i0=r, i1=k)
    c.bld.reads(x, s)
    c.bld.reads(buf, s)
    c.lay[op.outputs[0]] = out


def _same_grid(a: Layout, b: Layout) -> bool:
    return (np.array_equal(a.rstart, b.rstart) and np.array_equal(a.cstart, b.cstart)
            and np.array_equal(a.tile, b.tile))


def carried_in_place(c: Ctx, name: str, lay: Layout, ebytes: int) -> Layout | None:
    """policy.carried_in_place: the layout of the body input that body output `name` feeds,
    if the output can be written straight into it: the same blocks on the same tiles and
    bytes, and no later op of the body reads the input (its last read has passed). Then
    the body ends without the exchange that copies the output into the input's blocks
    (_end_body), a same-tile copy of the whole tensor every iteration."""
    inp = c.carried.get(name)
    if not c.policy.carried_in_place or inp is None:
        return None
    dst = c.lay[inp]
    _, stop = c.g.body()
    later = any(inp in o.inputs for o in c.g.ops[c.op + 1:stop])
    if later or dst.ebytes != ebytes or dst.panel or not _same_grid(dst, lay):
        return None
    return dst


def expand_add(c: Ctx, op):
    """Residual add; the second operand is converted to the first's layout if needed.
    A carried output may be written into its body input's blocks (carried_in_place)."""
    x, y = (c.lay[n] for n in op.inputs)
    if not _same_grid(x, y):
        y = convert(c.bld, y, f"{op.inputs[1]}@{op.outputs[0]}", x.rstart, x.cstart, x.tile,
                    c.exchange_step(), 8, STANDARD)
    s = c.compute_step()
    out = carried_in_place(c, op.outputs[0], x, OUT_BYTES)
    if out is not None:
        c.bld.reads(out, s)
    else:
        out = like(c.bld, op.outputs[0], x, s, OUT_BYTES)
    A, B, r, k = blocks(x)
    c.kernel(step=s, tile=x.tile[A, B], op=isa.ADD, dtype=F16, r0=out.req[A, B], r1=x.req[A, B],
             o1=x.off[A, B], r2=y.req[A, B], o2=y.off[A, B], i0=1, i1=r * k, i2=0)
    c.bld.reads(x, s)
    c.bld.reads(y, s)
    c.lay[op.outputs[0]] = out


def _rows_layout(c: Ctx, name: str, x: Layout, step_of):
    """x with whole rows per block (converted over all tiles when split by columns)."""
    if x.full_rows:
        return x
    rs = starts(x.rows, c.t.tiles)
    return convert(c.bld, x, f"{name}.rows", rs, [0], spread(len(rs), c.t.tiles), step_of(), 8, STANDARD)


def _row_calls(c: Ctx, op, r, k, ebytes: int):
    """The calls of a row-wise op over blocks of r x k: (block index, first row, rows) each.
    One per block, or with policy.row_calls the row chunks whose summed cycles (the target's
    own estimate of the kernel) are least (plan/rowcalls.py)."""
    one = np.arange(len(r))
    if not c.policy.row_calls or len(np.unique(k)) != 1:
        return one, np.zeros_like(r), r
    cols = int(k[0])
    if op.kind == "layernorm":
        cost = lambda n: c.t.layernorm_cycles(n, cols)
    else:
        scaled = op.attr("scale", 1.0) != 1.0
        cost = lambda n: c.t.softmax_cycles(n, cols, scaled, bool(op.attr("deferred")))
    return split_blocks(r, cost, row_quantum(cols * min(ebytes, OUT_BYTES)))


def expand_rowwise(c: Ctx, op):
    """LayerNorm and softmax: whole rows per tile; LayerNorm's gamma and beta gathered
    next to every block in the same exchange."""
    if op.kind == "layernorm" and c.op in c.halves:
        return expand_ln_halves(c, op)
    x = c.lay[op.inputs[0]]
    xs = []

    def step_of():   # one exchange superstep for the conversion and the parameters, made on demand
        if not xs:
            xs.append(c.exchange_step())
        return xs[0]

    x = _rows_layout(c, op.outputs[0], x, step_of)
    A, B, r, k = blocks(x)
    tiles = x.tile[A, B]
    if op.kind == "layernorm":
        C = x.cols
        gb = c.bld.alloc_rows(f"{op.outputs[0]}.gamma_beta", tiles, 2 * pad(C * 2, 8), 8, STANDARD, step_of())
        first = len(c.bld.xfer)
        for n, pname in enumerate(op.inputs[1:3]):
            c.gather_vector(pname, step_of(), tiles, gb, n * pad(C * 2, 8))
        c.may_move(op.inputs[1], first, gb, step_of())
    s = c.compute_step()
    out = like(c.bld, op.outputs[0], x, s, OUT_BYTES)
    i, first, r = _row_calls(c, op, r, k, x.ebytes)          # one call per block, or its row chunks (policy.row_calls)
    k, tiles, o0 = k[i], tiles[i], first * k[i] * out.ebytes
    o1 = x.off[A, B][i] + first * k * x.ebytes
    if op.kind == "layernorm":
        c.kernel(step=s, tile=tiles, op=isa.LAYERNORM, dtype=F16, r0=out.req[A, B][i], o0=o0, r1=x.req[A, B][i],
                 o1=o1, r2=gb[i], o2=0, r3=gb[i], o3=pad(C * 2, 8), i0=r, i1=k,
                 i2=isa.f32_bits(op.attr("eps", 1e-6)))
        c.bld.reads(gb, s)
    elif op.attr("deferred"):      # policy.deferred_norm: unnormalised rows, their f32 sums beside them
        sums = allocate(c.bld, f"{op.outputs[0]}.sums", x.rows, 1, x.rstart, [0], x.tile[:, :1], 4, 8, STANDARD, s)
        c.sums[op.outputs[0]] = sums
        c.kernel(step=s, tile=tiles, op=isa.SOFTMAX, dtype=F16 | isa.F_SM_DEFER << 16, r0=out.req[A, B][i], o0=o0,
                 r1=x.req[A, B][i], o1=o1, r2=sums.req[A, 0][i], o2=first * 4, i0=r, i1=k,
                 i2=isa.f32_bits(op.attr("scale", 1.0)), i3=op.attr("valid", 0))
    else:
        c.kernel(step=s, tile=tiles, op=isa.SOFTMAX, dtype=F16, r0=out.req[A, B][i], o0=o0, r1=x.req[A, B][i],
                 o1=o1, i0=r, i1=k, i2=isa.f32_bits(op.attr("scale", 1.0)), i3=op.attr("valid", 0))
    c.bld.reads(x, s)
    c.lay[op.outputs[0]] = out


def host_out(c: Ctx, name: str, stream: int):
    lay = c.lay[name]
    A, B, r, k = blocks(lay)
    e = lay.ebytes
    c.bld.add("hout", stream=stream, host_off=(lay.rstart[A] * lay.cols + lay.cstart[B]) * e,
              req=lay.req[A, B], off=lay.off[A, B], row_bytes=k * e, rows=r, host_stride=lay.cols * e,
              tile_stride=k * e)
    c.bld.reads(lay, len(c.kinds) + 1)


def dump_rows(op: int, step: int, lay: Layout) -> dict:
    """The blocks of op's output layout, complete after superstep `step` (row-major)."""
    A, B, r, k = blocks(lay)
    n = len(A)
    return dict(op=np.full(n, op), step=np.full(n, step), tile=lay.tile[A, B], req=lay.req[A, B],
                off=lay.off[A, B], r0=lay.rstart[A], rows=r, c0=lay.cstart[B], cols=k, ebytes=np.full(n, lay.ebytes))


def home_rotations(graph, names, seq, count: int, T: int, panels: dict, candidates: int = 64,
                   vectors: bool = False, base=None, replicas: bool = True) -> dict[str, int]:
    """Balanced home rotation: homes (plan/homes.py) put each tensor's bytes on evenly
    spread tiles from its rotation; largest tensors first, each takes the rotation (from
    `candidates` evenly spaced ones) that keeps the fullest tile lowest. A sequence
    counts all its members (they share one rotation). With `vectors` (policy.balanced_homes,
    expand/balance.py) the vectors' shard homes take part too, from the load `base`."""
    load = np.zeros(T, np.int64) if base is None else np.asarray(base, np.int64).copy()
    out = {}
    sizes = {}
    for n in names:
        t = graph.tensors[n]
        if t.shape[0] == 1:
            if vectors and t.kind == "param":          # replicated shard homes (vector_home)
                sizes[n] = vector_load(t, count if n in seq else 1, T, replicas)
            continue
        blocks, size = home_blocks(*t.shape, DTYPE_BYTES[t.dtype], T, panels.get(n, 0))
        sizes[n] = np.bincount(blocks[4], size * (count if n in seq else 1), minlength=T).astype(np.int64)
    for n in sorted(sizes, key=lambda n: (-int(sizes[n].sum()), n)):
        per = sizes[n]
        if graph.tensors[n].shape[0] == 1:   # a vector (balanced_homes): shards ~2 tiles apart need a fine
            best = vector_rotation(load, per)   # rotation; the fullest tile is often another's: evenest spread
        else:
            best = min(range(0, T, max(1, T // candidates)), key=lambda r: (int((load + np.roll(per, r)).max()), r))
        load += np.roll(per, best)
        out[n] = best
    return out


def _end_body(c: Ctx) -> int:
    """Close the Repeat body: carried outputs are exchanged into their inputs' blocks
    (which stay live through it: the next iteration reads them); ops after the body
    read a carried output there. Returns the step count so far (the body's end)."""
    moving = {out: inp for out, inp in c.carried.items() if c.lay[out] is not c.lay[inp]}
    if moving:
        x = c.exchange_step()
        for out, inp in moving.items():
            fill(c.bld, c.lay[out], c.lay[inp], x)
            c.bld.reads(c.lay[inp], x)
            c.lay[out] = c.lay[inp]
    return len(c.kinds)


def expand_graph(graph, strategy: dict, target: Target, policy, label: str = "",
                 resident: frozenset = frozenset(), halves: frozenset = frozenset()) -> TileGraph:
    """With a Repeat, the supersteps of its body ops (tg.body: a step range; the ops
    before and after it get steps of their own, run once) run `count` times: carried
    outputs are exchanged back into their inputs' blocks at the end of each iteration,
    and ops after the body and the host read the output from there. With
    `resident` matmuls, weights get no homes of their own: they stay where they are read."""
    c = Ctx(graph, target, policy)
    c.halves = frozenset(halves)
    rep = graph.repeat
    count = rep.count if rep else 1
    seq = set(rep.sequences) if rep else set()
    c.count, c.seq = count, seq
    c.carried = dict(rep.carried) if rep else {}
    ins = [t.name for t in graph.tensors.values() if t.kind in ("input", "param")]
    still = resident_stationary(graph, resident)
    c.stationary = {n: k for k, n in enumerate(ins) if n in still}
    homed = [n for n in ins if n not in c.stationary]
    resident_weights(c, strategy)
    ring = ring_weights(graph, strategy, resident)              # homed on their matmul's grid (plan/ring.py)
    ring_homes(c, {n: ring[n] for n in ins if n in ring}, strategy, {n: k for k, n in enumerate(ins)},
               {n: count if n in seq else 1 for n in ring})
    even = policy.balanced_homes and policy.vector_homes        # expand/balance.py
    rots = home_rotations(graph, [n for n in homed if n not in ring], seq, count, target.tiles, c.panels,
                          vectors=even, base=fixed_load(c.bld, target.tiles) if even else None,
                          replicas=vector_replicas(policy)) \
        if policy.home_rotation else {}
    for k, name in enumerate(ins):
        if name in homed and name not in ring:
            c.home(name, k, rots.get(name, 0), count if name in seq else 1,
                   resident=graph.tensors[name].kind == "param" or name in c.carried.values())
    first, stop = graph.body()
    body = [0, 0]                                      # the body's supersteps [b0, b1), 0-based
    for n, op in enumerate(graph.ops):
        c.op = n
        if rep and n == first:
            c.fence = body[0] = len(c.kinds)
        if rep and n == stop:
            body[1] = c.fence = _end_body(c)
        if op.kind == "matmul":
            expand_matmul(c, op, strategy[n], op.attr("scale", 1.0))
        elif op.kind in ("gelu", "cast"):
            expand_elementwise(c, op)
        elif op.kind == "add":
            expand_add(c, op)
        elif op.kind == "bias":
            expand_bias(c, op)
        elif op.kind in ("layernorm", "softmax"):
            expand_rowwise(c, op)
        elif op.kind == "flash_attention":
            expand_flash(c, op)
        else:
            raise NotImplementedError(f"expand: op {op.kind!r}")
        c.done[op.outputs[0]] = len(c.kinds)
        if not c.lay[op.outputs[0]].panel:
            c.dump.append(dump_rows(n, len(c.kinds), c.lay[op.outputs[0]]))
    if rep and stop == len(graph.ops):
        body[1] = _end_body(c)
    outs = [t.name for t in graph.of_kind("output")]
    for k, name in enumerate(outs):
        host_out(c, name, k)
    tg = c.bld.build(c.kinds, ins, {n: graph.tensors[n].nbytes for n in outs}, label, count)
    tg.body = tuple(body) if rep else (0, len(c.kinds))
    tg.step_op = c.step_op
    tg.dump = concat(c.dump) if c.dump else soa(DUMP)
    tg.in_panels = c.in_panels
    tg.bcast = bool(c.policy.broadcast_sends)
    tg.deferred = bool(c.sums)                         # the run's read-back checks the deferred ops
    if c.movable and c.policy.early_gathers:
        early_gathers(tg, c.movable, target, c.policy.early_fit)
    if c.movable and c.policy.split_gathers:
        split_gathers(tg, c.movable, target)
    return tg

"""The tile graph: what a candidate asks of every tile, as struct-of-arrays.

Events: event 0 is the host writing inputs and parameters; event s (1..S) is
superstep s; event S+1 the host reading outputs. Lifetimes are [start, end) in events.

  req   allocation requests: tile, size, align, region, start, end, count, stride, name
        (name indexes TileGraph.names: the logical buffer, e.g. "B.home")
  bank  request-row pairs that must sit in distinct memory elements
  kern  kernel runs: step, tile, op, dtype (word-0 bits above the opcode: dtype | dtype2 << 8
        | flags << 16), operands (request row + byte offset) r0,o0 .. r3,o3, immediates
        i0..i3, scale (see lower.WORDS for how they become instruction words); reloc =
        bytes added to operand 1's address per Repeat iteration (a weight read in place
        from its sequence home); sseq = 0 (the scale is the immediate `scale`) or s > 0:
        iteration i's scale is scale_seqs[s-1, i] (a Repeat body kernel whose tensors
        have one scale per layer; lower writes the row into the tile's table blob)
  xfer  exchange transfers: step, src/dst tile, src/dst request + offset, and each side's
        row shape (row_bytes, rows, stride): the two shapes carry the same bytes; reloc =
        bytes added to the source address per Repeat iteration (a sequence member)
  bseg  a MATMUL's b in segments (flag F_SEG_B, isa.py), rows in column order (row order
        with F_SEG_K): kern (its row in kern), request + offset, len (columns or rows),
        reloc (bytes added per Repeat iteration: a
        ring piece read in place, compiler/expand/ring.py); with rows > 0 a rectangle
        (flag F_SEG_2D, expand/ring2d.py): b[row:row+rows, col:col+len]; lower writes each
        kernel's segment table into the tile's table blob and points the b word at it
  hin/hout host stream rows: stream, host_off, req, off, row_bytes, rows, host_stride, tile_stride
  sin/sout the same, moved only by HOST instructions (hstep rows: step, tile, dir, first row of
        sin (dir 0) or sout (dir 1), rows, reloc = bytes added to the host offsets per iteration
        of the outer loop): a stream read or written one item a pipeline step
  outer the whole superstep sequence runs `outer` times (an outer REPEAT around everything,
        the Repeat body nested inside): the spatial pipeline's steps (compiler/expand/stages.py)
  dump  where each op's output can be read back (host-side only, the simulator never sees
        it): op index, the superstep completing it, and per block its tile, request +
        offset, rows r0..r0+rows × cols c0..c0+cols, row-major, ebytes per element

Rows are symbolic (a count and a stride), never one row object per tensor row.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

REQ = ("tile", "size", "align", "region", "start", "end", "count", "stride", "name")
KERN = ("step", "tile", "op", "dtype", "r0", "o0", "r1", "o1", "r2", "o2", "r3", "o3", "i0", "i1", "i2", "i3",
        "reloc", "sseq")
XFER = ("step", "src", "dst", "sreq", "soff", "dreq", "doff",
        "s_row_bytes", "s_rows", "s_stride", "d_row_bytes", "d_rows", "d_stride", "reloc")
END = -1   # request end placeholder: live to the end of the program
DUMP = ("op", "step", "tile", "req", "off", "r0", "rows", "c0", "cols", "ebytes")
HOST = ("stream", "host_off", "req", "off", "row_bytes", "rows", "host_stride", "tile_stride")
BSEG = ("kern", "req", "off", "len", "reloc", "row", "col", "rows")
HSTEP = ("step", "tile", "dir", "first", "rows", "reloc")


def soa(fields: tuple[str, ...], rows=None) -> dict[str, np.ndarray]:
    a = np.zeros((0, len(fields)), np.int64) if rows is None else np.asarray(rows, np.int64).reshape(-1, len(fields))
    return {f: a[:, i].copy() for i, f in enumerate(fields)}


def concat(parts: list[dict]) -> dict[str, np.ndarray]:
    keys = parts[0].keys()
    # axis=None flattens each part; one call per column (a 27-layer graph has ~20k parts)
    return {k: np.concatenate([p[k] for p in parts], axis=None, dtype=np.int64, casting="unsafe") for k in keys}


def drain(parts: list[dict]) -> dict[str, np.ndarray]:
    """concat(parts), emptying `parts` column by column as it goes: the parts and the
    whole table are never both held (at 27 layers a tile graph is ~190 MiB of int64
    columns, 2 in flight on the expand stage's threads)."""
    keys = list(parts[0])
    out = {}
    for k in keys:
        out[k] = np.concatenate([p.pop(k) for p in parts], axis=None, dtype=np.int64, casting="unsafe")
    parts.clear()
    return out


def _column(v, n: int) -> np.ndarray:
    """v as an int64 column of n rows: arrays already that shape as they are, scalars
    filled (np.broadcast_to's own checks cost more than the rest of Builder.add)."""
    a = np.asarray(v, np.int64)
    if a.shape == (n,):
        return a
    if a.ndim == 0:
        return np.full(n, a, np.int64)
    return np.broadcast_to(a, (n,))


def take(table: dict, mask) -> dict:
    return {k: v[mask] for k, v in table.items()}


@dataclass
class TileGraph:
    tiles: int
    steps: list[str]                          # kind of superstep s+1: "exchange" | "compute"
    names: list[str]
    req: dict
    bank: np.ndarray                          # int64[e, 2]
    kern: dict
    scale: np.ndarray                         # float64[len(kern)], MATMUL / CAST scale (iteration 0's)
    xfer: dict
    hin: dict
    hout: dict
    in_streams: list[str]
    out_streams: dict[str, int]
    label: str = ""
    in_panels: dict = field(default_factory=dict)  # input stream -> (rows, cols, ebytes, P), lower/program.py
    count: int = 1                            # supersteps body[0]..body[1]-1 are a Repeat body run count times
    body: tuple = ()                          # 0-based [first, stop) step range of the body; () = every step
    step_op: list = field(default_factory=list)   # op index that opened each superstep
    dump: dict = field(default_factory=dict)      # DUMP rows: op outputs read back by `run`
    analysis: dict = field(default_factory=dict)
    scale_seqs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # float64[nseq, count]
    bseg: dict = field(default_factory=lambda: soa(BSEG))   # MATMUL b segments (F_SEG_B)
    bcast: bool = False       # policy.broadcast_sends: one step's same source range to several tiles is one multicast send (isa.MCAST)
    deferred: bool = False    # policy.deferred_norm: its attention softmax / p·v pairs run deferred (compiler/deferred_norm.py)
    outer: int = 1            # runs of the whole superstep sequence (an outer REPEAT; 1: none)
    hstep: dict = field(default_factory=lambda: soa(HSTEP))    # HOST instructions
    sin: dict = field(default_factory=lambda: soa(HOST))       # stepped host rows they move in (dir 0)
    sout: dict = field(default_factory=lambda: soa(HOST))      # ... and out (dir 1)
    groups: int = 0           # a spatial pipeline's tile groups (compiler/spatial.py); 0: not a pipeline
    group_tiles: tuple = ()   # ... and each group's tiles, in chip order (policy.pipeline_fit may make them unequal)

    def body_steps(self) -> tuple[int, int]:
        return tuple(self.body) if self.body else (0, len(self.steps))

    def step_runs(self) -> np.ndarray:
        """Times each superstep executes: `count` inside the Repeat body, once outside;
        all of it `outer` times."""
        runs = np.full(len(self.steps), self.outer, np.int64)
        b0, b1 = self.body_steps()
        runs[b0:b1] *= self.count
        return runs

    @property
    def end_event(self) -> int:
        return len(self.steps) + 2

    # Artifacts hold tile graphs of a million rows: pickle each int64 column in the
    # smallest integer type that holds it (3-4x smaller artifacts and DVC cache), and
    # widen back on load, so the in-memory arithmetic stays int64.
    TABLES = ("req", "kern", "xfer", "hin", "hout", "bseg", "hstep", "sin", "sout")

    def __getstate__(self):
        state = dict(self.__dict__)
        for f in self.TABLES:
            state[f] = {k: _narrow(v) for k, v in state[f].items()}
        return state

    def __setstate__(self, state):
        for f, fields in (("hstep", HSTEP), ("sin", HOST), ("sout", HOST)):   # stored before they existed
            state.setdefault(f, soa(fields))
        state.setdefault("outer", 1)
        state.setdefault("groups", 0)
        state.setdefault("group_tiles", ())
        for f in self.TABLES:
            state[f] = {k: v.astype(np.int64) for k, v in state[f].items()}
        self.__dict__.update(state)


def _narrow(a: np.ndarray) -> np.ndarray:
    if not len(a):
        return a
    return a.astype(np.promote_types(np.min_scalar_type(int(a.min())), np.min_scalar_type(int(a.max()))))


class Builder:
    """Accumulates tile-graph rows in vectorised chunks."""

    def __init__(self, tiles: int):
        self.tiles = tiles
        self.names: list[str] = []
        self.req: list[dict] = []
        self.nreq = 0
        self.bank: list[np.ndarray] = []
        self.kern: list[dict] = []
        self.scale: list[np.ndarray] = []
        self.xfer: list[dict] = []
        self.hin: list[dict] = []
        self.hout: list[dict] = []
        self.bseg: list[dict] = []
        self.nkern = 0                        # kernel rows so far (bseg rows name them)
        self.uses: list[tuple[np.ndarray, int]] = []
        self.scale_seqs: list[tuple] = []

    def scale_of(self, scale) -> tuple[float, int]:
        """A kernel's (scale, sseq) for a scalar or per-iteration scale: a sequence of
        equal values stays an immediate; distinct sequences are numbered from 1."""
        s = np.atleast_1d(np.asarray(scale, np.float64))
        if (s == s[0]).all():
            return float(s[0]), 0
        key = tuple(float(v) for v in s)
        if key not in self.scale_seqs:
            self.scale_seqs.append(key)
        return key[0], 1 + self.scale_seqs.index(key)

    def alloc_rows(self, name: str, tiles, size, align, region, start, end=None, count=1,
                   stride=0) -> np.ndarray:
        """One request per entry of `tiles`; returns their request rows. By default a
        request lives from `start` through its last read (reads() extends it); END keeps
        it to the end of the program (resident parameters, carried values)."""
        if end is None:
            end = np.asarray(start) + 1
        tiles = np.asarray(tiles, np.int64).ravel()
        n = len(tiles)
        full = lambda v: _column(v, n)
        if name not in self.names:
            self.names.append(name)
        self.req.append(dict(tile=tiles, size=full(size), align=full(align), region=full(region),
                             start=full(start), end=full(end), count=full(count), stride=full(stride),
                             name=full(self.names.index(name))))
        rows = self.nreq + np.arange(n)
        self.nreq += n
        return rows

    def alloc(self, name: str, tiles, size, align, region, start, end=None) -> np.ndarray:
        """Like alloc_rows for distinct tiles; returns a map tile -> request row (-1: none)."""
        tiles = np.asarray(tiles, np.int64)
        rows = np.full(self.tiles, -1, np.int64)
        rows[tiles] = self.alloc_rows(name, tiles, size, align, region, start, end)
        return rows

    def reads(self, layout_or_rows, step: int) -> None:
        """Requests read at `step` stay live through it."""
        rows = getattr(layout_or_rows, "req", layout_or_rows)
        self.uses.append((np.asarray(rows, np.int64).ravel(), step))

    def add(self, table: str, **cols):
        sizes = [np.size(v) for v in cols.values() if np.ndim(v) > 0]
        n = max(sizes) if sizes else 1
        if n == 0:
            return
        fields = {"kern": KERN, "xfer": XFER, "hin": HOST, "hout": HOST, "bseg": BSEG}[table]
        default = lambda f: -1 if f in ("r0", "r1", "r2", "r3") else 0
        row = {f: _column(cols.get(f, default(f)), n) for f in fields}
        getattr(self, table).append(row)
        if table == "kern":
            self.nkern += n
            self.scale.append(np.broadcast_to(np.asarray(cols.get("scale", 1.0), np.float64), (n,)))

    def build(self, steps, in_streams, out_streams, label, count=1) -> TileGraph:
        cat = lambda parts, f: drain(parts) if parts else soa(f)      # the builder is spent after
        req = cat(self.req, REQ)
        req["end"] = np.where(req["end"] == END, len(steps) + 2, req["end"])
        for rows, step in self.uses:
            np.maximum.at(req["end"], rows, step + 1)
        return TileGraph(
            tiles=self.tiles, steps=list(steps), names=self.names, req=req,
            bank=np.concatenate(self.bank).reshape(-1, 2) if self.bank else np.zeros((0, 2), np.int64),
            kern=cat(self.kern, KERN),
            scale=np.concatenate(self.scale) if self.scale else np.zeros(0),
            xfer=cat(self.xfer, XFER), hin=cat(self.hin, HOST), hout=cat(self.hout, HOST),
            in_streams=list(in_streams), out_streams=dict(out_streams), label=label, count=count,
            bseg=cat(self.bseg, BSEG),
            scale_seqs=np.array(self.scale_seqs, np.float64).reshape(len(self.scale_seqs), count))

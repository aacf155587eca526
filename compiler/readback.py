"""Read-back validation, op by op (docs/architecture.md §3.7).

After the superstep that completes an op's output, the host reads the output's bytes
at their placed addresses (lower's dump rows: a tensor dump, as a debugger does on
hardware; the simulator's execution never depends on it). Each op is checked against
the reference op (compiler/reference.py; its arithmetic, compiler/reference_ops.py) applied to the device's own activations,
read back the same way when their producers completed, and to the true parameters
and inputs (the model's data: a wrong weight in a home or a wrong Repeat member
shows up in the op that reads it). The bound is one op's rounding, not the graph's,
so FP8 rounding decisions that diverge over many layers cannot hide a real bug.

Which ops (policy.check): `rows` (the default) checks every op of every Repeat iteration on
sampled rows -- every ROW_STRIDE-th row (readback_views.py), from an offset that moves with the iteration; a
matmul's sampled rows map through its groups to rows of `a`, its `b` whole -- and every
matmul also on column stripes: every row of one column in each tile's output block
(compiler/readback_views.py; COLUMN_STRIPES), so a fault in any iteration fails the op it hits whether it
spans a column (a wrong weight member or scale word: the rows see it) or a few rows of one
tile (a kernel skipping k terms: the stripes see it). Every row of every op costs +157 %
run CPU at 4 So400m layers (experiments/readback_cost); `all` does that; `last_iteration`
and `sampled` check whole iterations. Beside the op checks, in every mode,
policy.check_exchanges compares every exchange's destination bytes with its source's in
every iteration (compiler/exchange_check.py: stale, dropped or swapped received rows), and
each iteration's layer output (the Repeat's carried output) is read back and held to the
reference's value there (compiler/tolerance.py: check_layer).
NaN or inf anywhere -- an input the op reads, its output, the reference made from them --
fails the op with an infinite error, naming the tile (a NaN bound compares false with
everything, so `err <= bound` is what must hold, never `not err > bound`).

The bound of each op kind: compiler/op_bounds.py; other op kinds are counted as unchecked.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import reference
from .compare import real_rows
from .exchange_check import ExchangeCheck
from .ir import member
from .models.gemm import FP8
from .op_bounds import BOUNDS, op_error, ulp16
from .readback_views import ROW_SAMPLED, Views, checked_iterations
from .sim.memory import gather
from .snapshot import Snapshot

DTYPES = {"f16": np.float16, "fp8": FP8, "f32": np.float32}


# check=rows: each matmul also checked on every row of a few columns (readback_views.Views.cols), so a
# fault confined to rows the sample skips (one tile's kernel, a stale received row) meets a check
COLUMN_STRIPES = True
# a layer output element may differ from the reference's by LAYER_FLOOR_ULPS f16 units of its
# own value even where the reference's draws agree (tolerance.py): the layer's last ops (fc2's
# bias, the residual add) round once each and a rounding flip earlier moves it a unit or two
# (2 units seen at layer 0 of tests/test_tower.py's b16 batch, the draws 0.003 apart there)
LAYER_FLOOR_ULPS = 4
MAX_PENDING = 4  # checks queued on the worker at most (each holds its inputs' read-back values)


def static_step(step: int, b0: int, b1: int, count: int) -> tuple[int, int, bool]:
    """(iteration, step of the program, outside the body) of executed superstep `step` of a
    program whose supersteps [b0, b1) are a Repeat body run `count` times."""
    L = b1 - b0
    if step < b0:
        return 0, step, True
    if L and step < b0 + count * L:
        i, r = divmod(step - b0, L)
        return i, b0 + r, False
    return count - 1, step - (count - 1) * L, True


class ReadBack:
    """The host's per-superstep callback (sim.run's on_step): reads every completed op
    output of the iterations it checks and checks the op at once; keeps one iteration's
    activations (float64), dropping each after its last reader."""

    def __init__(self, graph, data: dict, dump: dict, body: tuple, check: str = "all", layers: dict | None = None,
                 moves: dict | None = None):
        self.g, self.data, self.d = graph, data, dump
        # every iteration: every exchange's destination bytes against its source's (moves:
        # lower's statement of the tile graph's transfers; compiler/exchange_check.py)
        self.moves, self.xc = moves or None, None
        rep = graph.repeat
        self.count = rep.count if rep else 1
        # supersteps [b0, b1) are the Repeat body, run count times; those before and after it
        # (a tower's patch embedding and head) run once
        self.b0, self.b1 = body
        self.seq = set(rep.sequences) if rep else set()
        self.carried = dict(rep.carried) if rep else {}          # body output -> body input
        self.check = checked_iterations(check, self.count)
        self.sample_rows = check == "rows"        # every iteration, on sampled rows (readback_views)
        self.rows = {n: np.flatnonzero(dump["op"] == n) for n in np.unique(dump["op"])} if len(dump.get("op", ())) else {}
        self.views = Views(graph, lambda n: int(dump["cols"][self.rows[n]].min()))
        self.at_step: dict[int, list[int]] = {}
        for n, idx in sorted(self.rows.items()):
            self.at_step.setdefault(int(dump["step"][idx[0]]), []).append(int(n))
        self.last_use = {}
        for n, op in enumerate(graph.ops):
            for name in op.inputs:
                self.last_use[name] = n
        self.layout: dict[int, list] = {}          # op -> where its output's blocks are (read)
        self.env: dict[str, Snapshot] = {}
        self.before: set[str] = set()            # outputs of ops before the body: kept for all iterations
        self.carry: dict[str, Snapshot] = {}
        self.iteration = 0
        self.checked = self.failed = self.unchecked = 0
        self.first_failed: dict | None = None
        self.worst_ratio = 0.0
        # checks run on one worker thread, beside the simulator (which leaves a core idle
        # in its exchanges and Python steps): each gets a snapshot of the values it reads,
        # and one worker runs them in submission order, so the figures do not depend on timing
        self.pool: ThreadPoolExecutor | None = None
        self.pending: list = []
        # every iteration: the layer output (the Repeat's carried output) against the
        # reference's value in that iteration (compiler/tolerance.py), checked ops or not
        self.layers = layers
        out = rep.carried[0][0] if rep and rep.carried and layers is not None else None
        self.layer_op = next((n for n, op in enumerate(graph.ops) if op.outputs[0] == out), None)
        if self.layer_op not in self.rows:
            self.layer_op = None
        self.layer_rows = real_rows(graph, out) if self.layer_op is not None else None
        self.layers_checked = self.layers_failed = 0
        self.layer_ratio = 0.0
        self.first_failed_layer: dict | None = None

    # ---- reading -------------------------------------------------------------------
    def read(self, mem, n: int) -> "Snapshot":
        """Op n's output as placed now: its blocks' bytes, copied (the simulator goes on
        writing memory); made into values only when a check on the worker reads them."""
        name = self.g.ops[n].outputs[0]
        t = self.g.tensors[name]
        groups = self.layout.get(n)
        if groups is None:                     # where the blocks are: the same every iteration
            d, idx = self.d, self.rows[n]
            e = int(d["ebytes"][idx[0]])
            R, C = d["rows"][idx], d["cols"][idx]
            groups = []
            for r, c in sorted({(int(a), int(b)) for a, b in zip(R, C)}):
                sel = idx[(R == r) & (C == c)]
                groups.append((mem.pos(d["tile"][sel], d["addr"][sel]), r, c, r * c * e,
                               d["r0"][sel].astype(np.int64), d["c0"][sel].astype(np.int64)))
            self.layout[n] = groups
        return Snapshot(t.shape, DTYPES[t.dtype], [(gather(mem.flat, pos, nb), r, c, r0, c0)
                                                    for pos, r, c, nb, r0, c0 in groups])

    def value(self, name: str, i: int, env: dict, carry: dict, rows=None, dtype=np.float64, cols=None):
        """An op input at iteration i: the device's activation (as read back: `env`, or
        `carry` from the iteration before), or the true data; only `rows` (or `cols`, every
        row) of it if given. float32 for a matmul's operands (its reference is computed in
        f32: see op_bounds._matmul)."""
        t = self.g.tensors[name]
        raw = env.get(name, carry.get(name) if i > 0 else None)
        pick = (lambda a: a) if rows is None and cols is None else \
            (lambda a: a[rows]) if cols is None else (lambda a: a[:, cols])
        if raw is not None:
            v = (raw.array() if rows is None and cols is None else raw.rows(rows) if cols is None
                 else raw.cols(cols)).astype(dtype)
            v *= member(t.scale, i)                       # in place: one copy of a big tensor, not two
            return v
        if name in self.data:
            if dtype == np.float32:            # the reference's own f32 value (FP8 by table lookup)
                return pick(reference._value(self.g, self.data, name, i if name in self.seq else None))
            v = self.data[name][i] if name in self.seq else self.data[name]
            v = pick(np.asarray(v)).astype(dtype)
            v *= member(t.scale, i)
            return v
        return None

    # ---- the callback --------------------------------------------------------------
    def on_step(self, step: int, mem) -> None:
        i, b, outside = static_step(step, self.b0, self.b1, self.count)
        if self.moves is not None:
            if self.xc is None:
                self.xc = ExchangeCheck(self.moves, mem.tile_bytes, mem.base)
            self.xc.on_step(b, i, not outside, mem)
        if i != self.iteration:                   # a new iteration: carried values move on
            self.carry = {inp: self.env[out] for out, inp in self.carried.items() if out in self.env}
            self.env = {k: v for k, v in self.env.items() if k in self.before and k not in self.carry}
            self.iteration = i
        for n in self.at_step.get(b + 1, ()):
            op = self.g.ops[n]
            out = op.outputs[0]
            checked = outside or i in self.check   # ops outside the body run once: always checked
            if checked or (out in self.carried and i + 1 in self.check):
                self.env[out] = self.read(mem, n)
                if outside and step < self.b0:
                    self.before.add(out)
            if n == self.layer_op and not outside:
                snap = self.env.get(out) or self.read(mem, n)
                self.submit(snap, self.check_layer, n, i, snap)
            if checked:
                self.submit(self.env.get(out), self.check_op, n, i, dict(self.env), dict(self.carry))
                for name in op.inputs:             # free what no later op of the body reads
                    if self.last_use.get(name) == n and name not in self.carried and name not in self.before:
                        self.env.pop(name, None)

    def submit(self, snap, fn, *args) -> None:
        """Queue a check on the worker. One worker runs them in order, so the done ones lead
        the list; the snapshots hold activations, so a lagging worker holds up the run
        rather than pile them up."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="readback")
        if len(self.pending) >= MAX_PENDING and not self.pending[0].done() and snap is not None:
            snap.array()                  # the worker lags: make these values here, not wait idle
        while self.pending and (self.pending[0].done() or len(self.pending) >= MAX_PENDING):
            self.pending.pop(0).result()          # a check's own error is raised here
        self.pending.append(self.pool.submit(fn, *args))

    def check_layer(self, n: int, i: int, snap: "Snapshot") -> None:
        """Iteration i's layer output against the reference's, within that iteration's
        tolerance or LAYER_FLOOR_ULPS units of each element (real rows; NaN, inf or an unread
        element is an infinite error)."""
        dev = snap.array()[self.layer_rows].astype(np.float64)
        want = self.layers["values"][i][self.layer_rows].astype(np.float64)
        err = np.abs(dev - want)
        err[~np.isfinite(err)] = np.inf
        self.layers_checked += 1
        tol = float(self.layers["tolerance"][i])
        if not (err > tol).any():                 # the floor only where the tolerance alone fails
            self.layer_ratio = max(self.layer_ratio, float(err.max(initial=0.0)) / tol if tol > 0 else 0.0)
            return
        tol = np.maximum(tol, LAYER_FLOOR_ULPS * ulp16(np.abs(want)))
        ratio = err / tol
        worst = float(ratio.max(initial=0.0))
        if worst <= 1:
            self.layer_ratio = max(self.layer_ratio, worst)
            return
        self.layers_failed += 1
        if self.first_failed_layer is None:
            r, c = np.unravel_index(int(np.argmax(ratio)), err.shape)
            row = int(np.flatnonzero(self.layer_rows)[r])
            self.first_failed_layer = dict(op=self.g.ops[n].outputs[0], iteration=i, tile=self.tile_of(n, row, int(c)),
                                           row=row, col=int(c), error=float(err[r, c]), tolerance=float(tol[r, c]),
                                           elements=int((err > tol).sum()))

    def check_op(self, n: int, i: int, env: dict, carry: dict) -> None:
        """Op n of iteration i: whole (check=all ...), or on sampled rows (check=rows), a
        matmul also on column stripes (readback_views); one failure counts the op failed."""
        op = self.g.ops[n].at(i)
        if op.kind not in BOUNDS:
            self.unchecked += 1
            return
        views = [([(None, None)] * len(op.inputs), (None, None), {})]
        if self.sample_rows and op.kind in ROW_SAMPLED:
            views = [self.views.rows(n, op, i)]
            if COLUMN_STRIPES and op.kind == "matmul" and self.views.cols(n, op, i) is not None:
                views.append(self.views.cols(n, op, i))
        for ins, out, attrs in views:
            got = self.check_view(n, i, op, env, carry, ins, out, attrs)
            if got is None:
                self.unchecked += 1
                return
            if not got:
                break
        self.checked += 1

    def check_view(self, n: int, i: int, op, env: dict, carry: dict, ins: list, out: tuple, attrs: dict):
        """One view of op n (inputs' and output's (rows, cols), attrs): True if within its
        bound, False if it failed (recorded), None if it cannot be checked."""
        if attrs:
            op = dataclasses.replace(op, attrs=tuple(sorted({**dict(op.attrs), **attrs}.items())))
        dt = np.float32 if op.kind == "matmul" else np.float64
        xs = [self.value(name, i, env, carry, r, dt, c) for name, (r, c) in zip(op.inputs, ins)]
        if any(x is None for x in xs):
            return None
        t = self.g.tensors[op.outputs[0]]
        raw = env.get(op.outputs[0])
        out_rows, out_cols = out
        # scale 1 (f16): the read-back float32 itself, exact, widened by numpy where it meets
        # the float64 reference (a float64 copy of a 27-layer tower's scores is 68 MB)
        if raw is not None and t.scale == 1.0:
            dev = raw.array() if out_rows is None and out_cols is None else \
                raw.rows(out_rows) if out_cols is None else raw.cols(out_cols)
        else:
            dev = self.value(op.outputs[0], i, env, carry, out_rows, cols=out_cols)
        # a non-finite input the device made fails the op even where its output hides it (a
        # masked column); the model's own data is not re-checked every iteration (a NaN the
        # host sends instead shows in the output)
        bad_in = next(((name, x) for name, x in zip(op.inputs, xs)
                       if name not in self.data and not np.isfinite(x).all()), None)
        if bad_in is not None:
            self.fail_nonfinite_input(n, i, *bad_in)
            return False
        _, bound, err = op_error(op, xs, dev, keep_ref=False)
        del xs, dev
        over = ~(err <= bound)                    # a NaN bound (from a NaN input) fails too
        if not over.any():
            if err.size:                  # err <= bound everywhere: err / bound in place
                np.divide(err, bound, out=err, where=bound > 0)
                self.worst_ratio = max(self.worst_ratio, float(err.max()))
            return True
        self.failed += 1
        if self.first_failed is None:
            excess = np.where(over, err - bound, -np.inf)
            excess[np.isnan(excess)] = np.inf
            r, c = np.unravel_index(int(np.argmax(excess)), err.shape)
            row = int(r) if out_rows is None else int(out_rows[r])     # the tensor's row
            col = int(c) if out_cols is None else int(out_cols[c])     # ... and column
            self.first_failed = dict(op=op.outputs[0], kind=op.kind, iteration=i, tile=self.tile_of(n, row, col),
                                     row=row, col=col, error=float(err[r, c]), bound=float(bound[r, c]),
                                     elements=int(over.sum()), **({"view": "columns"} if out_cols is not None else {}))
        return False

    def fail_nonfinite_input(self, n: int, i: int, name: str, x: np.ndarray) -> None:
        """Op n's input `name` holds NaN or inf at iteration i: the op fails, naming the tile
        that holds the first such element (its producer's block, or where op n's output row is)."""
        self.failed += 1
        if self.first_failed is None:
            r, c = (int(v) for v in np.argwhere(~np.isfinite(x))[0])
            producer = next((p for p, o in enumerate(self.g.ops) if o.outputs[0] == name), None)
            tile = self.tile_of(producer, r, c) if producer in self.rows else self.tile_of(n, min(r, len(x) - 1), 0)
            op = self.g.ops[n]
            self.first_failed = dict(op=op.outputs[0], kind=op.kind, iteration=i, tile=tile, row=r, col=c,
                                     error=float("inf"), bound=0.0, elements=int((~np.isfinite(x)).sum()),
                                     nonfinite_input=name)

    def tile_of(self, n: int, r: int, c: int) -> int:
        d, idx = self.d, self.rows[n]
        hit = (d["r0"][idx] <= r) & (r < d["r0"][idx] + d["rows"][idx]) & \
              (d["c0"][idx] <= c) & (c < d["c0"][idx] + d["cols"][idx])
        return int(d["tile"][idx][hit][0])

    def finish(self) -> None:
        """Wait for the checks still running (raising the first error of one)."""
        try:
            for f in self.pending:
                f.result()
        finally:
            self.close()

    def close(self) -> None:
        """Drop the checks not yet started (the run failed: its error is the one to see)."""
        self.pending = []
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None

    def metrics(self) -> dict:
        self.finish()
        unread = len(self.g.ops) - len(self.rows)          # outputs without dump rows: never read
        m = {"ops_checked": self.checked, "ops_failed": self.failed,
             "ops_unchecked": self.unchecked + unread * len(self.check),
             "op_error_ratio": round(self.worst_ratio, 6)}
        if self.first_failed:
            m["first_failed_op"] = self.first_failed
        if self.xc is not None:
            m |= self.xc.metrics()
        if self.layer_op is not None:
            m |= {"layers_checked": self.layers_checked, "layers_failed": self.layers_failed,
                  "layer_error_ratio": round(self.layer_ratio, 6)}
            if self.first_failed_layer:
                m["first_failed_layer"] = self.first_failed_layer
        return m

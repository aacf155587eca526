"""Read-back validation, op by op (docs/architecture.md §3.7).

After the superstep that completes an op's output, the host reads the output's bytes
at their placed addresses (lower's dump rows: a tensor dump, as a debugger does on
hardware; the simulator's execution never depends on it). Each op is checked against
the reference op (compiler/reference.py) applied to the device's own activations,
read back the same way when their producers completed, and to the true parameters
and inputs (the model's data: a wrong weight in a home or a wrong Repeat member
shows up in the op that reads it). The bound is one op's rounding, not the graph's,
so FP8 rounding decisions that diverge over many layers cannot hide a real bug.

Bounds (u = 2^-11, f16's unit roundoff; e = 2^-24, f32's; t = 2^-25, half the
smallest f16 subnormal; ulp = f16's spacing at the reference value):
  matmul      (3u + (2k+8)e) * sum|a||b| * |scale| + t: the device's products exact in
              f32, summed in f32 (k e), k-split partials rounded to f16 (u), their f32 sum
              rounded once (u), one u to spare; the reference is computed in f32 too
              (inputs rounded to f32, k-term f32 sums: another (k+2)e).
  add, bias   ulp: the f32 sum of two f16 values rounded once (half an ulp; f32 slack).
  cast        exact: the device value must be the e4m3 rounding of x/scale, allowing
              either neighbour only where x/scale lies within 2^-20 (relative) of a
              rounding midpoint (the device divides in f32).
  gelu        ulp + (16 + 8|x| + |x|^3) e |ref| + t: f32 evaluation, whose exp argument
              (~1.6(|x| + 0.045|x|^3)) carries a relative error of e per unit.
  layernorm   ulp + (D+8) e |gamma| (|z| + rstd mean|x| (1 + |z|)) + e|beta| + t: the
              f32 mean of D terms errs by D e mean|x|, shifting z by rstd times that and
              the variance (so rstd) relatively by as much; the rest few e.
  softmax     ulp + ref ((n+8) e + 4e (|s| + 2 max|s|)) + t, s = x*scale over the n valid
              columns: f32 scaling and exp arguments (e|s| each), an n-term sum, a divide.
  flash_attention  (expm1(2D_i) + 8u) (P|V|) + ulp + t per row i: a score perturbed by at
              most D_i = (3u + (d+4)e) max_j sum|q||k| scale + u max_j|s| changes each
              softmax weight by a factor within exp(+-2 D_i); every stored intermediate
              (partial outputs, merged sums) rounds to f16 a few times (8u).
Other op kinds are counted as unchecked.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import exact, reference
from .ir import member
from .policy import CHECKS
from .models.gemm import FP8, FP8_MAX
from .sim import jit
from .sim.memory import gather

U, E, TINY = 2.0 ** -11, 2.0 ** -24, 2.0 ** -25
DTYPES = {"f16": np.float16, "fp8": FP8, "f32": np.float32}


MAX_PENDING = 4  # checks queued on the worker at most (each holds its inputs' read-back values)
ROWS = 1024     # row block of the softmax bound's ulp term (its temporaries were the run stage's peak)


def ulp16(x: np.ndarray) -> np.ndarray:
    """f16's spacing at |x| (subnormal spacing 2^-24 near 0)."""
    ex = np.frexp(x)[1]                                   # in place below: these are the run
    ex[x == 0] = -13                                      # stage's largest temporaries (frexp(0) = (0, 0))
    ex -= 11
    out = np.ldexp(1.0, ex)
    return np.maximum(out, 2.0 ** -24, out=out)


def checked_iterations(check: str, count: int) -> set[int]:
    if check not in CHECKS:
        raise ValueError(f"run.check={check!r}: not one of {', '.join(CHECKS)}")
    if check == "all":
        return set(range(count))
    if check == "last_iteration":
        return {count - 1}
    return {0, count // 2, count - 1}


# ---- one op's reference and bound ---------------------------------------------------

def _matmul(op, x, _):
    """In f32 (BLAS at twice the f64 rate): rounding the inputs to f32 and summing k
    products in f32 err by at most (k+2)e sum|a||b| more, which the bound adds."""
    a, b = (v.astype(np.float32) for v in x)
    ref = reference.matmul(op, a, b)
    s = reference.matmul(op, np.abs(a), np.abs(b))
    np.abs(s, out=s)
    k = op.attr("k")
    s *= (3 * U + (2 * k + 8) * E) * (1 + (k + 2) * E)    # last factor: s itself summed in f32
    s += TINY
    return ref, s


def _sum(op, x, _):
    ref = x[0] + x[1]
    return ref, ulp16(ref)


def _gelu(op, x, _):
    ref = reference.gelu(x[0], op.attr("approx", "tanh"))
    ax = np.abs(x[0])
    return ref, ulp16(ref) + (16 + 8 * ax + ax * ax * ax) * E * np.abs(ref) + TINY   # (** 3 is libm's pow)


def _layernorm(op, x, _):
    v, gamma, beta = x
    D = v.shape[1]
    ref = reference.layernorm(v, gamma, beta, op.attr("eps", 1e-6))
    mu = v.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(((v - mu) ** 2).mean(1, keepdims=True) + op.attr("eps", 1e-6))
    z = np.abs((v - mu) * rstd)
    shift = rstd * np.abs(v).mean(1, keepdims=True)
    return ref, ulp16(ref) + (D + 8) * E * np.abs(gamma) * (z + shift * (1 + z)) + E * np.abs(beta) + TINY


def _softmax(op, x, _):
    scale, valid = op.attr("scale", 1.0), op.attr("valid", 0)
    ref = reference.softmax(x[0], scale, valid)
    n = valid or x[0].shape[1]
    bound = np.full(ref.shape, TINY)            # the biggest tensors: bound built in place
    s = np.abs(x[0][:, :n], out=bound[:, :n])
    s *= abs(scale)
    s += 2 * s.max(1, keepdims=True)
    s *= 4 * E
    s += (n + 8) * E
    s *= ref[:, :n]
    for r0 in range(0, len(s), ROWS):            # ulp16's temporaries a block of rows at a time
        s[r0:r0 + ROWS] += ulp16(ref[r0:r0 + ROWS, :n])
    s += TINY
    return ref, bound


def _flash(op, x, _):
    q, k, v = x
    ref = reference._op(op, x, lambda a: a)
    H, d, valid, scale = op.attr("heads"), op.attr("head_dim"), op.attr("valid"), op.attr("scale")
    bound = ulp16(ref) + TINY
    for h in range(H):
        c = slice(h * d, (h + 1) * d)
        # reference.dot, not BLAS: these bounds decide op_error_ratio, a stored figure (issue #24)
        s = reference.dot(q[:, c], k[:, c].T) * scale
        sa = reference.dot(np.abs(q[:, c]), np.abs(k[:, c]).T) * abs(scale)
        n = valid or s.shape[1]
        D = (3 * U + (d + 4) * E) * sa[:, :n].max(1) + U * np.abs(s[:, :n]).max(1)
        p = reference.softmax(s, 1.0, valid)
        # expm1(y) <= y e^y for y >= 0, e^y by exact.exp64 (numpy's exp and expm1 vary by CPU)
        bound[:, c] += (2 * D * exact.exp_array(2 * D) + 8 * U)[:, None] * reference.dot(p, np.abs(v[:, c]))
    return ref, bound


def _cast(op, x, dev):
    """Distance from the device value to the nearest admissible rounding (bound 0)."""
    scale = op.attr("scale")
    q = x[0] / scale
    cands = [np.clip(q * (1 + d), -FP8_MAX, FP8_MAX).astype(FP8).astype(np.float64) * scale
             for d in (0.0, -2.0 ** -20, 2.0 ** -20)]
    err = np.min([np.abs(dev - c) for c in cands], axis=0)
    return cands[0], np.zeros_like(err), err


BOUNDS = {"matmul": _matmul, "add": _sum, "bias": _sum, "gelu": _gelu, "layernorm": _layernorm,
          "softmax": _softmax, "flash_attention": _flash, "cast": _cast}


def op_error(op, inputs: list, dev: np.ndarray, keep_ref: bool = True):
    """(reference, bound, error) of one op given its inputs and the device's output.
    keep_ref=False: the error is computed in the reference's array (returned as None) and
    the `inputs` list is emptied once the bound is made -- the read-back's largest checks
    (a 27-layer tower's attention scores) set the run stage's peak RSS."""
    res = BOUNDS[op.kind](op, inputs, dev)
    if not keep_ref:
        inputs.clear()
    ref, bound = res[0], res[1]
    if len(res) > 2:
        err = res[2]
    else:
        bad = ~(np.isfinite(dev) & np.isfinite(ref))
        d, r = dev[bad], ref[bad]                  # equal infinities, NaN for NaN: no error
        err = np.subtract(dev, ref, out=None if keep_ref else ref)
        np.abs(err, out=err)
        err[bad] = np.where((d == r) | (np.isnan(d) & np.isnan(r)), 0.0, np.inf)
        return (ref if keep_ref else None), bound, err
    bad = ~np.isfinite(err)
    if bad.any():
        d, r = dev[bad], ref[bad]
        err[bad] = np.where((d == r) | (np.isnan(d) & np.isnan(r)), 0.0, np.inf)
    return ref, bound, err


class Snapshot:
    """An op output's bytes as read back (per block shape: the blocks' raw bytes, their
    rows and columns, and where each starts in the tensor); array() makes the values
    (float32: f16 and e4m3 values are exact in it, NaN where no block lies), once. The
    simulator's thread only copies bytes; the checks' worker makes and places the values."""

    def __init__(self, shape, dtype, blocks):
        self.shape, self.dtype, self.blocks, self._arr = shape, dtype, blocks, None
        self._lock = threading.Lock()     # the worker, or the simulator's thread when the worker lags

    def array(self) -> np.ndarray:
        with self._lock:
            if self._arr is None:
                out = np.full(self.shape, np.nan, np.float32)
                for raw, r, c, r0, c0 in self.blocks:
                    vals = raw.view(self.dtype).reshape(len(raw), r, c).astype(np.float32)
                    jit.place_blocks(out, vals, r0, c0)
                self._arr, self.blocks = out, None
            return self._arr     # stored values: times the tensor's scale when used


class ReadBack:
    """The host's per-superstep callback (sim.run's on_step): reads every completed op
    output of the iterations it checks and checks the op at once; keeps one iteration's
    activations (float64), dropping each after its last reader."""

    def __init__(self, graph, data: dict, dump: dict, body: tuple, check: str = "all"):
        self.g, self.data, self.d = graph, data, dump
        rep = graph.repeat
        self.count = rep.count if rep else 1
        # supersteps [b0, b1) are the Repeat body, run count times; those before and after it
        # (a tower's patch embedding and head) run once
        self.b0, self.b1 = body
        self.seq = set(rep.sequences) if rep else set()
        self.carried = dict(rep.carried) if rep else {}          # body output -> body input
        self.check = checked_iterations(check, self.count)
        self.rows = {n: np.flatnonzero(dump["op"] == n) for n in np.unique(dump["op"])} if len(dump.get("op", ())) else {}
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

    def value(self, name: str, i: int, env: dict, carry: dict):
        """An op input at iteration i: the device's activation (as read back: `env`, or
        `carry` from the iteration before), or the true data."""
        t = self.g.tensors[name]
        raw = env.get(name, carry.get(name) if i > 0 else None)
        if raw is not None:
            v = raw.array().astype(np.float64)
            v *= member(t.scale, i)                       # in place: one copy of a big tensor, not two
            return v
        if name in self.data:
            v = self.data[name][i] if name in self.seq else self.data[name]
            return np.asarray(v).astype(np.float64) * member(t.scale, i)
        return None

    # ---- the callback --------------------------------------------------------------
    def static_step(self, step: int) -> tuple[int, int, bool]:
        """(iteration, step of the program, outside the body) of executed superstep `step`."""
        b0, L = self.b0, self.b1 - self.b0
        if step < b0:
            return 0, step, True
        if L and step < b0 + self.count * L:
            i, r = divmod(step - b0, L)
            return i, b0 + r, False
        return self.count - 1, step - (self.count - 1) * L, True

    def on_step(self, step: int, mem) -> None:
        i, b, outside = self.static_step(step)
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
            if checked:
                if self.pool is None:
                    self.pool = ThreadPoolExecutor(1, thread_name_prefix="readback")
                # one worker runs them in order, so the done ones lead the list; the snapshots
                # hold activations, so a lagging worker holds up the run rather than pile them up
                if len(self.pending) >= MAX_PENDING and not self.pending[0].done() and out in self.env:
                    self.env[out].array()      # the worker lags: make these values here, not wait idle
                while self.pending and (self.pending[0].done() or len(self.pending) >= MAX_PENDING):
                    self.pending.pop(0).result()          # a check's own error is raised here
                self.pending.append(self.pool.submit(self.check_op, n, i, dict(self.env), dict(self.carry)))
                for name in op.inputs:             # free what no later op of the body reads
                    if self.last_use.get(name) == n and name not in self.carried and name not in self.before:
                        self.env.pop(name, None)

    def check_op(self, n: int, i: int, env: dict, carry: dict) -> None:
        op = self.g.ops[n].at(i)
        xs = [self.value(name, i, env, carry) for name in op.inputs]
        if op.kind not in BOUNDS or any(x is None for x in xs):
            self.unchecked += 1
            return
        t = self.g.tensors[op.outputs[0]]
        raw = env.get(op.outputs[0])
        # scale 1 (f16): the read-back float32 itself, exact, widened by numpy where it meets
        # the float64 reference (a float64 copy of a 27-layer tower's scores is 68 MB)
        dev = raw.array() if raw is not None and t.scale == 1.0 else self.value(op.outputs[0], i, env, carry)
        _, bound, err = op_error(op, xs, dev, keep_ref=False)
        del xs, dev
        self.checked += 1
        over = err > bound
        if not over.any():
            if err.size:                  # err <= bound everywhere: err / bound in place
                np.divide(err, bound, out=err, where=bound > 0)
                self.worst_ratio = max(self.worst_ratio, float(err.max()))
            return
        self.failed += 1
        if self.first_failed is None:
            r, c = np.unravel_index(int(np.argmax(np.where(over, err - bound, -np.inf))), err.shape)
            self.first_failed = dict(op=op.outputs[0], kind=op.kind, iteration=i, tile=self.tile_of(n, r, c),
                                     row=int(r), col=int(c), error=float(err[r, c]), bound=float(bound[r, c]),
                                     elements=int(over.sum()))

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
        return m

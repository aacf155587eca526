"""run: execute the lowered program on the simulator and validate it (docs/architecture.md §3.7):
end to end (the outputs against the numpy reference computed in the reference phase), every
Repeat iteration's layer output against the reference's there (compiler/tolerance.py), and
op by op (compiler/readback.py: each op's output read back from its placed bytes after
the superstep completing it, against the reference op on the device's own inputs; the
default policy.check=rows reads every iteration on sampled rows)."""
from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .target import DTYPE_BYTES, Target


@dataclass
class RunResult:
    cycles: int = 0
    cycles_per_layer: int = 0        # one Repeat iteration (= cycles without a Repeat)
    cycles_per_step: list = field(default_factory=list)
    step_kind: list = field(default_factory=list)
    tile_cycles: np.ndarray | None = None
    host_cycles: int = 0
    ms: float = 0.0
    max_abs_error: float = float("nan")   # end to end, over real (unpadded) rows
    rms_rel_error: float = float("nan")   # rms of the error over rms of the reference, real rows
    rms_rel_error_vs_fp16: float | None = None   # FP8 activations: the same against the model with FP16 ones
    tolerance: float = 0.0
    validated: bool = False
    readback: dict = field(default_factory=dict)   # ReadBack.metrics(): ops_checked, ops_failed, ...
    throughput: dict = field(default_factory=dict)  # a tower's latency_ms and images_per_s (throughput())
    model: dict = field(default_factory=dict)      # a tower's check against the independent model (model_check.check)
    fp8_accuracy: dict = field(default_factory=dict)   # FP8 activations: per output, the device vs the FP16 twin (budgets)
    failed: str = ""                               # not validated: the checks that failed, "; "-separated, each named
    outputs: dict = field(default_factory=dict)    # graph output name -> float32, the device's
    reference: dict = field(default_factory=dict)  # the same names, the reference's
    rejection: object = None

    def metrics(self) -> dict:
        if self.rejection:
            return {"validated": False}
        return {"cycles": self.cycles, "cycles_per_layer": self.cycles_per_layer, "ms": round(self.ms, 6),
                **self.throughput,
                "host_cycles": self.host_cycles,
                "max_abs_error": self.max_abs_error, "rms_rel_error": self.rms_rel_error,
                **({} if self.rms_rel_error_vs_fp16 is None else
                   {"rms_rel_error_vs_fp16_activations": self.rms_rel_error_vs_fp16}),
                "tolerance": self.tolerance, **self.readback, **_model_metrics(self.model),
                **({"fp8_accuracy": self.fp8_accuracy} if self.fp8_accuracy else {}),
                "validated": self.validated, **({"failed": self.failed} if self.failed else {}),
                "supersteps": len(self.cycles_per_step)}

    def output_npz(self) -> bytes:
        """artifacts/run/output.npz: every graph output as float32 (`<name>`, the device's;
        `reference/<name>`, the reference's), padded rows included; np.load(...,
        allow_pickle=False) reads it. Byte-identical for the same values (fixed zip dates).
        Stored, not deflated: ~7 MB at any depth, and deflating it took ~1.2 s of the run stage."""
        arrays = {**self.outputs, **{f"reference/{n}": v for n, v in self.reference.items()}}
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
            for name in sorted(arrays):
                npy = io.BytesIO()
                np.lib.format.write_array(npy, np.ascontiguousarray(arrays[name], np.float32), allow_pickle=False)
                z.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), npy.getvalue())
        return buf.getvalue()


def _model_metrics(m: dict) -> dict:
    """run.model_rms_rel_error / model_cosine (the worst over the outputs) and the per-output
    figures; nothing for a model without a timm counterpart."""
    if not m:
        return {}
    return {"model_rms_rel_error": m["rms_rel_error"], "model_cosine": m["cosine"], "model_check": m}


def model_check(ref, g) -> dict:
    """The graph's FP16-activation evaluation against the independent model's ({} without
    one); the device is held to that evaluation by the other checks (model_check.py)."""
    if getattr(ref, "model_figures", None) is None:
        return {}
    from . import model_check as mc
    return mc.check(g, ref.model_figures, getattr(ref, "model_weights", None))


def fp8_accuracy(g, got16: dict, fp16: dict | None, budgets: dict) -> dict:
    """FP8 activations: per output, the rms relative error (real rows) of the device's
    outputs against the same model with FP16 activations (the reference's twin), within
    its budget (`budgets`: output name -> rms; policy.fp8_budget_*), and for a batch each
    image's too (`worst_image_rms_rel_error`); {} without casts, and
    for a graph that is not a whole tower (encoder blocks on seeded tokens: the budgets are
    stated for a model's embedding / logits and features)."""
    from .model_check import applies
    if fp16 is None or not applies(g):
        return {}
    from .compare import images, rms_rel_error, worst_image_error
    out = {n: {"rms_rel_error": round(rms_rel_error(g, {n: got16[n]}, {n: fp16[n]}), 9), "budget": budgets[n]}
           for n in sorted(fp16)}
    for n, f in out.items():
        if images(g) > 1:                      # a batch: each image within the budget, not only their mean
            f["worst_image_rms_rel_error"] = round(worst_image_error(g, {n: got16[n]}, {n: fp16[n]}), 9)
        f["ok"] = max(f["rms_rel_error"], f.get("worst_image_rms_rel_error", 0.0)) <= f["budget"]
    return out


def over_budget(acc: dict) -> str:
    """fp8_accuracy's outputs over their budget, for a run's `failed`."""
    worst = lambda f: f" (worst image {f['worst_image_rms_rel_error']:.4g})" if "worst_image_rms_rel_error" in f else ""
    return "; ".join(f"{n} rms {f['rms_rel_error']:.4g}{worst(f)} > {f['budget']:.4g}"
                     for n, f in acc.items() if not f["ok"])


def throughput(g, t: Target, cycles: int) -> dict:
    """A tower's latency (first image in to last output out: the input images over the host
    link, the program, the outputs back; the weights are resident, loaded once, so not
    counted) and images per second with batches run back to back, nothing overlapped (a
    floor: a host link that streams the next batch during compute would only raise it).
    {} for a graph that is not a tower (no `images` in its meta)."""
    images = g.meta.get("images")
    if not images:
        return {}
    from .sim.load import host_cycles
    size = lambda kind: sum(math.prod(x.shape) * DTYPE_BYTES[x.dtype] for x in g.of_kind(kind))
    total = cycles + host_cycles(t, size("input"), size("output"))
    return {"latency_ms": round(total / t.clock_hz * 1e3, 6), "images_per_s": round(images * t.clock_hz / total, 3)}


class _Streams(Mapping):
    """The host streams as bytes, made when host_in asks for each: not held for the
    whole run (27 layers of weights are ~390 MB; the model's data may read them from its
    file only now, see pipeline/codec.py FileArray)."""

    def __init__(self, names, override: dict, data: dict):
        self.names, self.override, self.data = list(names), override, data

    def __getitem__(self, n):
        if n not in self.names:
            raise KeyError(n)
        return np.ascontiguousarray(self.override.get(n, self.data[n])).view(np.uint8).ravel()

    def __contains__(self, n):
        return n in self.names

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)


def run(lower_res, model, t: Target, check: str = "all", streams: dict | None = None, inject=None, *,
        ref, fp8_budget: tuple[float, float] = (0.03, 0.05), check_exchanges: bool = True, host=None) -> RunResult:
    """`ref`: the reference phase's result (outputs, tolerance, the model's figures).
    Per-layer cycles come from the profile: the supersteps of the Repeat body's last iteration.
    `check` (rows | all | last_iteration | sampled) chooses the ops read back (readback.py).
    Fault-injection tests may replace host streams (`streams`: name -> array) or write
    placed bytes after a superstep (`inject(step, memory)`, before it is read back;
    after, if the hook has a true `after_checks` attribute);
    the checks always hold the device to the model's data. `fp8_budget`: (embedding or
    logits, features) rms relative error allowed against the FP16-activation twin
    (policy.fp8_budget_embedding, policy.fp8_budget_features). `check_exchanges`
    (policy.check_exchanges): every exchange's bytes in every iteration (exchange_check.py).
    `host`: a spatial pipeline's (compiler/spatial.Host): its streams, its items' outputs, and
    its checks over the outer loop (op read-back per group, group boundaries, exchanges)."""
    if lower_res.rejection:
        return RunResult(rejection=lower_res.rejection)
    from . import sim      # here, not at the top: reading a RunResult (report) needs no simulator
    from .readback import ReadBack
    from .readback_views import checked_iterations
    from .compare import real_rows, rms_rel_error
    from .deferred_norm import defer
    # the graph as the program computes it: with policy.deferred_norm its softmax / p·v pairs
    # are checked op by op against their deferred reference ops (the outputs against the model's)
    prog, g = lower_res.program, defer(model.graph, lower_res.deferred_norm)
    count = g.repeat.count if g.repeat else 1
    checked_iterations(check, count)                      # a bad value fails before the run
    streams = host if host is not None else _Streams(prog.in_streams, streams or {}, model.data)
    dump = getattr(lower_res, "dump", None) or {}
    rb = ReadBack(g, model.data, dump, lower_res.body, check, getattr(ref, "layers", None),
                  getattr(lower_res, "moves", None) if check_exchanges else None) if dump and host is None else None
    hooks = [h for h in (inject, rb.on_step if rb else None, *(host.hooks() if host else ())) if h is not None]
    if getattr(inject, "after_checks", False):   # a fault only the next superstep's kernels see
        hooks.reverse()
    try:
        r = sim.run(prog, streams, (lambda step, mem: [h(step, mem) for h in hooks]) if hooks else None)
    except BaseException:
        for h in (rb, host):
            if h is not None:
                h.close()
        raise
    err = 0.0
    outputs, refs, got16 = {}, {}, {}
    out = host.outputs(r.outputs) if host is not None else r.outputs
    for name, want in ref.outputs.items():
        got16[name] = got = out[name].view(np.float16).reshape(want.shape)
        outputs[name], refs[name] = got.astype(np.float32), want.astype(np.float32)
        keep = real_rows(g, name)
        d = np.abs(got[keep].astype(np.float64) - want[keep].astype(np.float64))
        err = max(err, float(d.max(initial=0.0)) if np.isfinite(d).all() else float("inf"))
    rms_rel = rms_rel_error(g, got16, ref.outputs)
    fp16 = ref.fp16_outputs
    rbm = host.metrics() if host else rb.metrics() if rb else {"ops_checked": 0, "ops_failed": 0}
    inside = host.failed() if host else [] if rbm["ops_checked"] > 0 and rbm["ops_failed"] == 0 and \
        rbm.get("layers_failed", 0) == 0 and rbm.get("exchanges_failed", 0) == 0 else ["per-op"]
    model = model_check(ref, g)
    acc = fp8_accuracy(g, got16, fp16, {n: fp8_budget[n == "features"] for n in ref.outputs})
    failed = inside + [name for name, ok in (("end to end", err <= ref.tolerance), ("model", model.get("ok", True)),
                                             ("fp8 accuracy", all(f["ok"] for f in acc.values()))) if not ok]
    if "model" in failed:
        failed[failed.index("model")] = model["failed"]
    if "fp8 accuracy" in failed:
        failed[failed.index("fp8 accuracy")] = "fp8 accuracy: the device's output differs from the FP16-activation " \
            "twin's beyond its budget: " + over_budget(acc)
    b0, b1 = lower_res.body                               # the last iteration of the body
    last = b0 + (count - 1) * (b1 - b0)
    return RunResult(cycles=int(r.total_cycles), cycles_per_layer=int(sum(r.step_cycles[last:last + b1 - b0])),
                     cycles_per_step=[int(c) for c in r.step_cycles],
                     step_kind=list(r.step_kind), tile_cycles=r.tile_cycles, host_cycles=int(r.host_cycles),
                     ms=r.total_cycles / t.clock_hz * 1e3, max_abs_error=err, rms_rel_error=round(rms_rel, 9),
                     rms_rel_error_vs_fp16=None if fp16 is None else round(rms_rel_error(g, got16, fp16), 9),
                     tolerance=ref.tolerance,
                     validated=not failed, failed="; ".join(failed), fp8_accuracy=acc,
                     readback=rbm, model=model,
                     throughput=host.throughput(t, int(r.total_cycles), g.meta.get("images", 1)) if host
                     else throughput(g, t, int(r.total_cycles)),
                     outputs=outputs, reference=refs)

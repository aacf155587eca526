"""run on a pod: chip after chip, the link between them (DESIGN.md §7a).

Chip k's program runs on the simulator (compiler/run.py's run, unchanged: read-back op by
op, every layer output held to the reference's at its global layer, the exchange check)
as one task of the mapper, so each chip is simulated on its own worker. Its carried
activation leaves through the boundary's LINK program (pod/link.py words, executed and
costed by compiler/sim/link.py, the cycles re-derived by compiler/sim/link_oracle.py) and
enters chip k+1's input buffer. Chip k+1 then reads its received bytes back from its own
tiles after its first superstep and compares them with the bytes chip k sent (the
transfer check: a corrupted or misplaced byte fails, naming the link and the byte); a
wire of the wrong length (a dropped row) is refused by the machine.

The pipeline's figures: latency = the images in over the host link + every stage's cycles
+ every transfer + the outputs out; images/s at batch B = B images per slowest stage (a
stage: its chip's cycles plus its outgoing transfer, plus the host link at the ends),
stages overlapping on different batches. The whole tower's outputs (the last chip's) are
held to the reference end to end, and the model check and FP8 budgets apply to them as on
one chip."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..target import DTYPE_BYTES
from .link import encode
from .split import Split, chip_model


@dataclass
class ChipRun:
    run: object                      # compiler.run.RunResult of the chip
    sent: np.ndarray | None = None   # uint8: the carried activation it sends (None: the last chip)
    transfer: dict = field(default_factory=dict)   # its receive's check: bytes, failed, first_failed


@dataclass
class PodRun:
    chips: list = field(default_factory=list)        # ChipRun per chip
    links: list = field(default_factory=list)        # per boundary: bytes, cycles, oracle_cycles, words
    split: Split | None = None
    cycles: int = 0                  # one image batch through the pipeline: stages + transfers
    cycles_per_layer: int = 0        # the slowest chip's one layer
    ms: float = 0.0
    throughput: dict = field(default_factory=dict)
    max_abs_error: float = float("nan")
    rms_rel_error: float = float("nan")
    tolerance: float = 0.0
    model: dict = field(default_factory=dict)
    fp8_accuracy: dict = field(default_factory=dict)
    validated: bool = False
    failed: str = ""
    outputs: dict = field(default_factory=dict)
    reference: dict = field(default_factory=dict)
    rejection: object = None

    def metrics(self) -> dict:
        if self.rejection:
            return {"validated": False}
        from ..run import _model_metrics
        chips = {f"chip{k}": {"layers": int(self.split.layers[k]), **_chip_metrics(c)}
                 for k, c in enumerate(self.chips)}
        links = {f"link{k}": {n: v for n, v in li.items() if n != "words"} for k, li in enumerate(self.links)}
        return {"cycles": self.cycles, "cycles_per_layer": self.cycles_per_layer, "ms": round(self.ms, 6),
                **self.throughput, "max_abs_error": self.max_abs_error, "rms_rel_error": self.rms_rel_error,
                "tolerance": self.tolerance, **_model_metrics(self.model),
                **({"fp8_accuracy": self.fp8_accuracy} if self.fp8_accuracy else {}),
                "validated": self.validated, **({"failed": self.failed} if self.failed else {}),
                "chips": len(self.chips), **chips, **links}

    def pod_report(self, model, plan_res, expand_res, place_res, sched, t, host=None):
        """compiler/report's report() for a pod (so that compiler/report imports nothing of compiler/pod)."""
        from .report import pod_report
        return pod_report(model, plan_res, expand_res, place_res, sched, self, t, host)

    def output_npz(self) -> bytes:
        from ..run import RunResult
        return RunResult(outputs=self.outputs, reference=self.reference).output_npz()


def _chip_metrics(c: ChipRun) -> dict:
    m = c.run.metrics()
    keep = ("cycles", "cycles_per_layer", "ms", "max_abs_error", "tolerance", "validated", "failed",
            "ops_checked", "ops_failed", "layers_checked", "layers_failed", "exchanges_checked", "exchanges_failed")
    return {k: m[k] for k in keep if k in m} | ({"transfer": c.transfer} if c.transfer else {})


def chip_reference(ref, split: Split, k: int):
    """The reference chip k is held to: its layers' outputs and tolerances; the boundary
    activation (the layer output at its last layer) as its output, or the tower's outputs
    on the last chip. No model check per chip (the whole tower's, on the last chip's outputs)."""
    a, b = split.ranges()[k]
    layers = {n: v[a:b] for n, v in ref.layers.items()}
    only = dict(layers=layers, model_outputs=None, model_figures=None, model_weights=None, fp8_clipping=None)
    if k == len(split.layers) - 1:
        return replace(ref, **only)
    return replace(ref, outputs={"y": ref.layers["values"][b - 1]}, tolerance=float(ref.layers["tolerance"][b - 1]),
                   fp16_outputs=None, fp8_activation_error=None, **only)


def received_bytes(mem, rows: np.ndarray, nbytes: int) -> np.ndarray:
    """The host's read-back of a RECV's rows from a chip's tiles, in wire order."""
    out = np.zeros(nbytes, np.uint8)
    for tile, addr, rb, n, ts, off, ws in rows.tolist():
        pos = mem.pos(np.full(n, tile), addr + ts * np.arange(n))
        for j, p in enumerate(pos.tolist()):
            out[off + j * ws:off + j * ws + rb] = mem.flat[p:p + rb]
    return out


class _TransferCheck:
    """After chip k+1's first superstep (before any later one may reuse the buffer), its
    received activation read back from its tiles against what chip k sent."""

    def __init__(self, rows, sent, link: int):
        self.rows, self.sent, self.link, self.result = rows, sent, link, {}

    def __call__(self, step, mem):
        if step != 0:
            return
        got = received_bytes(mem, self.rows, len(self.sent))
        bad = np.flatnonzero(got != self.sent)
        self.result = {"bytes": int(len(self.sent)), "failed": int(len(bad))}
        if len(bad):
            self.result["first_failed"] = f"link {self.link}->{self.link + 1}: byte {int(bad[0])} received " \
                                          f"{int(got[bad[0]])}, sent {int(self.sent[bad[0]])}"


def run_chip(k: int, *, lower, model, ref, target, policy, wire=None, sent=None, recv_rows=None, link=None):
    """One chip's run (a mapper task): compiler/run.py's run with the link's bytes as its
    input stream and the transfer check hooked after its first superstep."""
    from ..run import run
    (y, x), = model.graph.repeat.carried
    check = _TransferCheck(recv_rows, sent, link) if wire is not None else None
    r = run(lower, model, target, policy.check, {x: wire} if wire is not None else None, check, ref=ref,
            fp8_budget=(policy.fp8_budget_embedding, policy.fp8_budget_features),
            check_exchanges=policy.check_exchanges)
    out = None
    if y in r.outputs and not r.rejection:     # the bytes the chip's SEND gathers (its y out-stream)
        out = r.outputs[y].astype(np.float16).view(np.uint8).ravel()
    return ChipRun(r, out, check.result if check else {})


def _keep(acc, i, res):
    return res


def pod_run(lo, m, ref, target, policy, pod, mapper, inject_link=None) -> PodRun:
    """`inject_link(link, wire) -> wire`: a test's fault on the wire between chip link and link + 1."""
    from ..run import fp8_accuracy, model_check
    from ..sim import link as sim_link
    from ..sim.link_oracle import link_cycles
    if lo.rejection:
        return PodRun(rejection=lo.rejection, split=lo.split)
    split, N, g = lo.split, len(lo.chips), m.graph
    (y, x), = g.repeat.carried
    tdict = {**{f: getattr(target, f) for f in ("clock_hz", "exchange_bytes_per_cycle")},
             "pod": {"link_bytes_per_s": pod.link_bytes_per_s, "link_latency_cycles": pod.link_latency_cycles}}
    chips, links, sent = [], [], None
    for k in range(N):
        mk, extra = chip_model(m, split, k), {}
        if k > 0:
            words = encode(lo.chips[k - 1].program, lo.chips[k].program, y, x, k - 1, pod.links[k - 1])
            wire = sim_link.send(words, sent)
            if inject_link is not None:
                wire = inject_link(k - 1, wire)
            sim_link.recv(words, wire)
            cyc = sim_link.cycles(words, target, pod.link_bytes_per_s, pod.link_latency_cycles)
            links.append({"bytes": int(len(wire)), "cycles": cyc, "oracle_cycles": link_cycles(words, tdict),
                          "words": words})
            mk.data[x] = wire.view(np.float16).reshape(mk.graph.tensors[x].shape)
            dec = sim_link.decode(words)
            extra = dict(wire=wire, sent=sent, recv_rows=dec["recv"], link=k - 1)
        c = mapper("run_chip", run_chip, [k], _keep, None,
                   dict(lower=lo.chips[k], model=mk, ref=chip_reference(ref, split, k), target=target,
                        policy=policy, **extra))
        chips.append(c)
        sent = c.sent
    return _figures(chips, links, split, g, m, ref, target, model_check(ref, g), fp8_accuracy, policy)


def _figures(chips, links, split, g, m, ref, target, model, fp8_accuracy, policy) -> PodRun:
    from ..compare import images as compare_images, rms_rel_error
    from ..run import over_budget
    from ..sim.load import host_cycles
    last = chips[-1].run
    size = lambda kind: sum(math.prod(t.shape) * DTYPE_BYTES[t.dtype] for t in g.of_kind(kind))
    host_in, host_out = host_cycles(target, size("input"), 0), host_cycles(target, 0, size("output"))
    stages = [c.run.cycles + (links[k]["cycles"] if k < len(links) else 0) for k, c in enumerate(chips)]
    stages[0] += host_in
    stages[-1] += host_out
    total = sum(c.run.cycles for c in chips) + sum(li["cycles"] for li in links)
    images = compare_images(g)
    thr = {"latency_ms": round((total + host_in + host_out) / target.clock_hz * 1e3, 6),
           "images_per_s": round(images * target.clock_hz / max(stages), 3),
           "slowest_stage": int(np.argmax(stages)), "stage_cycles": [int(s) for s in stages]}
    got16 = {n: last.outputs[n].astype(np.float16) for n in ref.outputs}
    acc = fp8_accuracy(g, got16, ref.fp16_outputs,
                       {n: (policy.fp8_budget_embedding, policy.fp8_budget_features)[n == "features"]
                        for n in ref.outputs})
    failed = [f"chip {k}: {c.run.failed}" for k, c in enumerate(chips) if not c.run.validated]
    failed += [c.transfer["first_failed"] for c in chips if c.transfer.get("failed")]
    failed += [f"link {k}->{k + 1}: simulator {li['cycles']} cycles, oracle {li['oracle_cycles']}"
               for k, li in enumerate(links) if li["cycles"] != li["oracle_cycles"]]
    if not model.get("ok", True):
        failed.append(model["failed"])
    if not all(f["ok"] for f in acc.values()):
        failed.append("fp8 accuracy: " + over_budget(acc))
    return PodRun(chips=chips, links=links, split=split, cycles=int(total),
                  cycles_per_layer=max(c.run.cycles_per_layer for c in chips), ms=total / target.clock_hz * 1e3,
                  throughput=thr, max_abs_error=last.max_abs_error,
                  rms_rel_error=round(rms_rel_error(g, got16, ref.outputs), 9), tolerance=ref.tolerance,
                  model=model, fp8_accuracy=acc, validated=not failed, failed="; ".join(failed),
                  outputs=last.outputs, reference=last.reference)

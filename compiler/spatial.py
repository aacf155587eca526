"""The spatial pipeline on one chip, compiled and run (issue #27; the tile graph:
compiler/expand/stages.py, the cost model: compiler/plan/pipeline.py).

compile_groups: the model cut into G groups of equal layer counts (compiler/pod/split.py
chip_model: group 0 has the patch embedding, group G-1 the head, every group its layers'
weights and per-layer scales), each planned and expanded by the single-chip phases on a
w = tiles // G tile target, merged into one chip tile graph, then placed, scheduled and
lowered like any trial.

run_items: N images through the lowered program in one simulator run (N + G - 1
pipeline steps: the host pads the image stream with G - 1 zero items and drops the first
G - 1 outputs). Each image's outputs are held to that image's own reference (the
reference phase of the same model on that image) at its tolerance; the machine's cycles
to the expand analysis' and to the independent cycle oracle's."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import mapper as mappers
from .result import Rejection
from .target import Target


@dataclass
class Spatial:
    groups: int
    layers: int                       # per group
    items: int                        # pipeline steps: images + groups - 1
    lower: object = None              # LowerResult of the chip
    place: object = None
    analysis: dict = field(default_factory=dict)
    group_models: list = field(default_factory=list)
    rejection: Rejection | None = None


def group_target(t: Target, groups: int) -> Target:
    return Target.from_dict({**{f: getattr(t, f) for f in t.__dataclass_fields__}, "tiles": t.tiles // groups})


def compile_groups(model, t: Target, policy, groups: int, images: int, mapper=mappers.serial) -> Spatial:
    from .deferred_norm import device_model
    from .expand import ExpandResult, Expanded, expand
    from .expand.analysis import analyse
    from .expand.stages import merge
    from .lower import lower
    from .place.config import PlaceConfig
    from .place.phase import place
    from .plan import plan
    from .pod.split import Split, chip_model
    from .schedule import schedule
    g = model.graph
    L = g.repeat.count if g.repeat else 0
    if groups < 2 or not L or L % groups:
        raise ValueError(f"pipeline groups={groups}: must be at least 2 and divide the encoder's {L} layers")
    n, items = L // groups, images + groups - 1
    sp = Spatial(groups, n, items)
    split = Split((n,) * groups, (0,) * groups, (0,) * groups, 0, 1, 0)
    tw = group_target(t, groups)
    tgs = []
    for k in range(groups):
        mk = device_model(chip_model(model, split, k), policy.deferred_norm)
        sp.group_models.append(mk)
        p = plan(mk, tw, policy)
        e = expand(mk, p, tw, policy, mapper) if not p.rejection else ExpandResult(rejection=p.rejection)
        if e.rejection:
            sp.rejection = e.rejection
            return sp
        tgs.append(e.finalists[0].tilegraph)
    (y, x), = g.repeat.carried
    image, = [n_ for n_, v in g.tensors.items() if v.kind == "input"]
    last = sp.group_models[-1].graph
    out_bytes = {o.name: o.nbytes for o in last.of_kind("output")}
    tg = merge(tgs, t.tiles, items, image, x, y, g.tensors[image].nbytes, out_bytes,
               g.tensors[x].nbytes // g.tensors[x].shape[0], label=f"pipeline {groups} x {n} layers")
    tg.analysis = sp.analysis = analyse(tg, t)
    pl = place(ExpandResult(finalists=[Expanded(None, tg, tg.analysis)]), t, PlaceConfig.from_dict(policy.place),
               mapper)
    sp.place = pl
    if pl.rejection:
        sp.rejection = pl.rejection
        return sp
    sp.lower = lower(pl, schedule(pl, t), t, policy.exchange_table_cap)
    return sp


def streams(sp: Spatial, image_inputs: list) -> dict:
    """The host's streams: the images then G - 1 zero items, every group's parameters
    (its layers' members) and its carried input x zeroed (the fill's first steps)."""
    prog = sp.lower.program
    first = sp.group_models[0].graph
    image, = [n for n, v in first.tensors.items() if v.kind == "input"]
    pad = [np.zeros_like(image_inputs[0])] * (sp.groups - 1)
    out = {image: np.ascontiguousarray(np.stack(list(image_inputs) + pad)).view(np.uint8).ravel()}
    for name in prog.in_streams:
        if name == image:
            continue
        k, n = name.split("/", 1)
        data = sp.group_models[int(k[1:])].data[n]
        out[name] = np.ascontiguousarray(np.asarray(data)).view(np.uint8).ravel()
    return out


def run_items(sp: Spatial, image_inputs: list, refs: list, t: Target) -> dict:
    """Run N images (their input tensors) through the program; refs: each image's
    reference phase result. Returns the figures and every image's error."""
    from . import sim
    from .sim.oracle import step_cycles as oracle_steps
    prog = sp.lower.program
    G, N = sp.groups, len(image_inputs)
    bounds = Boundaries(sp, refs, N)
    r = sim.run(prog, streams(sp, image_inputs), bounds)
    errors, ok = [], bounds.failed == 0 and bounds.checked == N * (G - 1)
    for name, size in prog.out_streams.items():
        items = r.outputs[name].view(np.float16).reshape(sp.items, -1)[G - 1:]
        for i in range(N):
            want = refs[i].outputs[name]
            d = np.abs(items[i].reshape(want.shape).astype(np.float64) - want.astype(np.float64))
            err = float(d.max()) if np.isfinite(d).all() else float("inf")
            errors.append(err)
            ok &= err <= refs[i].tolerance
    oracle = int(oracle_steps(prog).sum())
    per_step = r.total_cycles / sp.items
    return dict(validated=bool(ok), errors=errors, boundaries_checked=bounds.checked,
                boundaries_failed=bounds.failed, boundary_errors=bounds.errors, cycles=int(r.total_cycles), oracle_cycles=oracle,
                expand_cycles=int(sp.analysis["cycles"]), step_cycles=round(per_step),
                images_per_s=round(N * t.clock_hz / r.total_cycles, 3),
                steady_images_per_s=round(t.clock_hz / per_step, 3),
                latency_ms=round(G * per_step / t.clock_hz * 1e3, 6))


class Boundaries:
    """Read-back at every group boundary: after each pipeline step's shift, group k+1's
    input x (read from its tiles through its own host rows) must be layer (k+1) n - 1's
    output of the image it now holds (image s - k at step s), within that layer's
    tolerance (the reference phase's per-layer checkpoints of that image)."""

    def __init__(self, sp: Spatial, refs: list, images: int):
        from .pod.link import _rows
        prog = sp.lower.program
        b0, b1 = sp.lower.body
        nsteps = len(sp.place.tilegraph.steps)
        self.per = nsteps + (b1 - b0) * (sp.place.tilegraph.count - 1)   # supersteps one pipeline step executes
        x = sp.group_models[1].graph.repeat.carried[0][1]
        self.rows = [_rows(prog.host_in, prog.in_streams.index(f"g{k}/{x}")) for k in range(1, sp.groups)]
        self.shape = sp.group_models[1].graph.tensors[x].shape
        self.sp, self.refs, self.images = sp, refs, images
        self.checked = self.failed = 0
        self.errors = []

    def __call__(self, step, mem):
        from .pod.run import received_bytes
        s, at = divmod(step, self.per)
        if at != self.per - 1:
            return
        for k, rows in enumerate(self.rows):
            img = s - k
            if not 0 <= img < self.images:
                continue
            layer = (k + 1) * self.sp.layers - 1
            got = received_bytes(mem, rows, int(np.prod(self.shape)) * 2).view(np.float16).reshape(self.shape)
            lay = self.refs[img].layers
            err = float(np.abs(got.astype(np.float64) - lay["values"][layer].astype(np.float64)).max())
            self.checked += 1
            self.failed += not err <= float(lay["tolerance"][layer])
            self.errors.append(err)

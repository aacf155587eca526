"""The spatial pipeline on one chip, compiled and run (issue #27, policy.pipeline_groups; the
chip's tile graph: compiler/expand/stages.py; the cost model: compiler/plan/pipeline.py).

The model is cut into G groups of equal layer counts (compiler/pod/split.py chip_model:
group 0 has the patch embedding, group G-1 the head, every group its layers' weights and
per-layer scales). plan_phase plans each group on a w = tiles // G tile target;
expand_phase expands each there (or, with policy.pipeline_fit, each on the tiles it needs:
compiler/spatial_tiles.py) and merges one finalist of each into the chip's tile graph (a
group's first that places with the support the chip gives it), which place, schedule and
lower treat like any other.

The program runs `images + G - 1` pipeline steps: a trial's batch is one item (its steady
state: one batch a step), run_items streams N images. The host pads the image stream with
G - 1 zero items and drops the first G - 1 outputs (Host). Each output is held to its own
image's reference; inside, every group's ops are read back in every step (Ops), every
exchanged byte is held to its source (Exchanges), and every group boundary is read back
(Boundaries) against that image's layer output."""
from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from . import mapper as mappers
from .result import Rejection
from .spatial_tiles import FIT_REASONS, group_target
from .target import Target


@dataclass
class SpatialPlan:
    groups: int
    layers: int                       # per group
    images: int                       # items streamed through: the program's steps are images + groups - 1
    plans: list = field(default_factory=list)   # PlanResult per group
    rejection: Rejection | None = None
    family: dict = field(default_factory=dict)   # policy.pipeline_groups=auto: the priced plan families (compiler/family.py)

    def metrics(self) -> dict:
        return {"pipeline_groups": self.groups, "layers_per_group": self.layers,
                "groups": [p.metrics() for p in self.plans], **({"family": self.family} if self.family else {})}


def group_models(model, groups: int, deferred: bool) -> list:
    from .deferred_norm import device_model
    from .pod.split import Split, chip_model
    g = model.graph
    L = g.repeat.count if g.repeat and g.repeat.carried else 0
    if groups < 2 or not L or L % groups:
        raise ValueError(f"policy.pipeline_groups={groups}: must be at least 2 and divide the encoder's {L} layers "
                         f"(graph {g.name})")
    n = L // groups
    split = Split((n,) * groups, (0,) * groups, (0,) * groups, 0, 1, 0)
    return [device_model(chip_model(model, split, k), deferred) for k in range(groups)]


def plan_phase(model, t: Target, policy, groups: int, images: int = 1) -> SpatialPlan:
    from .plan import plan
    rep = model.graph.repeat
    L = rep.count if rep and rep.carried else 0
    if not L or L % groups:             # a sweep over depths meets these: data, not a crash
        return SpatialPlan(groups, 0, images, rejection=Rejection(
            "plan", "pipeline_groups", f"policy.pipeline_groups={groups} does not divide the encoder's {L} layers "
            f"(graph {model.graph.name})", {"groups": groups, "layers": L}))
    ms = group_models(model, groups, policy.deferred_norm)
    sp = SpatialPlan(groups, ms[0].graph.repeat.count, images)
    tw = group_target(t, t.tiles // groups)
    for k, mk in enumerate(ms):
        p = plan(mk, tw, policy)
        sp.plans.append(p)
        if p.rejection and not (policy.pipeline_fit and p.rejection.reason in FIT_REASONS):
            sp.rejection = _in_group(p.rejection, k, sp, tw)    # else expand gives the group more tiles
            break
    return sp


def _in_group(r: Rejection, k: int, sp: SpatialPlan, tw: Target) -> Rejection:
    return replace(r, message=f"pipeline group {k} ({sp.layers} layers on {tw.tiles} tiles): {r.message}",
                   figures={**r.figures, "group": k})


def expand_phase(model, sp: SpatialPlan, t: Target, policy, mapper=mappers.serial):
    """Each group expanded on its tiles (tiles // G; with policy.pipeline_fit, when a group
    does not fit there, each group on the tiles compiler/spatial_tiles.py gives it); the
    chip's tile graph merged from one finalist of each (_placed). With the flag, a group none
    of whose finalists places with the chip's support gets 1/64 more tiles (at least one),
    the others what is left, until the least counts overfill the chip."""
    from .expand import ExpandResult, expand
    from .spatial_tiles import Fits, fit, over, shares
    if sp.rejection:
        return ExpandResult(rejection=sp.rejection)
    ms = group_models(model, sp.groups, policy.deferred_norm)
    G, even = sp.groups, t.tiles // sp.groups
    fits = Fits(ms, t, policy, mapper)
    for k, (mk, p) in enumerate(zip(ms, sp.plans)):      # the plan phase's plans, on tiles // G
        fits.done[k, even] = p, (ExpandResult(rejection=p.rejection) if p.rejection else
                                 expand(mk, p, group_target(t, even), policy, mapper))
    least, why = [], ""
    bad = [k for k in range(G) if not fits.ok(k, even)]
    if bad and policy.pipeline_fit and all(fits(k, even)[1].rejection.reason in FIT_REASONS for k in bad):
        least, why = fit(fits, t.tiles)
    while True:
        widths = shares(least, t.tiles) if least and not why else [even] * G
        short = [k for k, w in enumerate(widths) if not fits.ok(k, w)]
        if short:
            k, w = short[0], widths[short[0]]
            rej = _in_group(fits(k, w)[1].rejection, k, sp, group_target(t, w))
            return ExpandResult(rejection=replace(rej, message=rej.message + (f" (pipeline_fit: {why})" if why else "")))
        res, k = _placed(model, ms, sp, t, policy, mapper, widths,
                         [[f.tilegraph for f in fits(k, w)[1].finalists] for k, w in enumerate(widths)])
        if k is None or not policy.pipeline_fit:
            return res
        if not least:
            least, why = fit(fits, t.tiles)
            if not least:
                return res
        least[k] = max(least[k], widths[k] + max(1, widths[k] // 64))
        why = over(least, t.tiles)
        if why:
            return replace(res, rejection=replace(res.rejection, message=f"{res.rejection.message} (pipeline_fit: {why})"))


def _placed(model, ms: list, sp: SpatialPlan, t: Target, policy, mapper, widths: list, fins: list):
    """The chip's tile graph from one finalist of each group (group k on widths[k] tiles),
    a group's finalist kept when it places alone with the support the chip gives its tiles
    (code and tables grow by the other groups' supersteps it SYNCs through, the profile by
    the pipeline steps) and its input x live throughout, as on the chip: then the chip's
    tiles of that group place too (same requests, same order of events); else that group's
    next finalist, and the merge again. (ExpandResult, None), or (its rejection, the group
    none of whose finalists placed)."""
    from .expand import ExpandResult, Expanded
    from .expand.analysis import analyse, profile_bytes
    from .expand.stages import merge
    from .place.config import PlaceConfig
    from .place.phase import place
    G, pcfg, off = sp.groups, PlaceConfig.from_dict(policy.place), np.cumsum([0] + widths)
    g = model.graph
    (y, x), = g.repeat.carried
    image = image_name(g)
    out_bytes = {o.name: o.nbytes for o in ms[-1].graph.of_kind("output")}
    choice = [0] * G
    while True:
        tg = merge([f[c] for f, c in zip(fins, choice)], t.tiles, sp.images + G - 1, image, x, y,
                   g.tensors[image].nbytes, out_bytes, g.tensors[x].nbytes // g.tensors[x].shape[0],
                   [0] + [g.body()[0]] * (G - 1), label=f"pipeline {G} x {sp.layers} layers")
        tg.analysis = a = analyse(tg, t)
        for k, f in enumerate(fins):
            gk = f[choice[k]]
            r = {c: v.copy() for c, v in gk.req.items()}
            if k:                                 # x crosses the outer loop
                r["end"][gk.hin["req"][np.asarray(gk.in_streams)[gk.hin["stream"]] == x]] = gk.end_event
            sl = slice(off[k], off[k + 1])
            view = replace(gk, req=r, analysis={**gk.analysis, "code_bytes": a["code_bytes"][sl],
                                                "table_bytes": a["table_bytes"][sl], "profile_bytes": profile_bytes(tg)})
            tw = group_target(t, widths[k])
            pk = place(ExpandResult(finalists=[Expanded(None, view, view.analysis)]), tw, pcfg, mapper)
            if pk.rejection:
                choice[k] += 1
                if choice[k] == len(f):
                    rej = _in_group(pk.rejection, k, sp, tw)
                    tile = rej.figures.get("tile")
                    return ExpandResult(rejection=replace(
                        rej, phase="expand", message=f"{rej.message} (each of its {len(f)} finalists placed with the "
                        f"chip's support; group tile {tile} is chip tile {off[k] + (tile or 0)})")), k
                break
        else:
            return ExpandResult(finalists=[Expanded(None, tg, a)]), None


def image_name(g) -> str:
    name, = [n for n, v in g.tensors.items() if v.kind == "input"]
    return name


class Host(Mapping):
    """The host side of a pipeline run: its streams (the images and G - 1 zero items; each
    group's parameters, its layers' members, made when the machine asks for them; each
    group's carried input zeroed, for the fill), the outputs of the real items, and the
    checks the run calls after every superstep (`hooks`): op read-back in the groups, the
    exchanges, the group boundaries."""

    def __init__(self, model, lower_res, groups: int, inputs: list, refs: list, deferred: bool = False,
                 check_exchanges: bool = True, check: str = "rows"):
        self.prog, self.groups, self.inputs = lower_res.program, groups, inputs
        self.ms = group_models(model, groups, deferred)
        self.image = image_name(model.graph)
        self.items = len(inputs) + groups - 1
        self.boundaries = b = Boundaries(lower_res, self.ms, refs, len(inputs))
        self.exchanges = Exchanges(lower_res, b.per, b.layers) if check_exchanges and lower_res.moves else None
        self.ops = Ops(lower_res, self.ms, b, check, self.item_image)

    def item_image(self, s: int) -> np.ndarray:
        return self.inputs[s] if s < len(self.inputs) else np.zeros_like(self.inputs[0])

    def hooks(self) -> list:
        """What the host calls after every executed superstep (sim.run's on_step)."""
        return [h for h in (self.exchanges, self.ops, self.boundaries) if h is not None]

    def metrics(self) -> dict:
        return {**self.boundaries.metrics(), **self.ops.metrics(), **(self.exchanges.metrics() if self.exchanges else {})}

    def failed(self) -> list[str]:
        """The checks inside the chip that failed (run.failed's words)."""
        m = self.metrics()
        return [name for name, ok in (("per-op", m["ops_checked"] > 0 and not m["ops_failed"]),
                                      ("group boundaries", self.boundaries.ok),
                                      ("exchanges", not m.get("exchanges_failed"))) if not ok]

    def close(self) -> None:
        self.ops.close()

    def __getitem__(self, name):
        if name == self.image:
            pad = [np.zeros_like(self.inputs[0])] * (self.groups - 1)
            return np.ascontiguousarray(np.stack(list(self.inputs) + pad)).view(np.uint8).ravel()
        if name not in self.prog.in_streams:
            raise KeyError(name)
        k, n = name.split("/", 1)
        return np.ascontiguousarray(np.asarray(self.ms[int(k[1:])].data[n])).view(np.uint8).ravel()

    def __iter__(self):
        return iter(self.prog.in_streams)

    def __len__(self):
        return len(self.prog.in_streams)

    def outputs(self, out: dict, i: int = 0) -> dict:
        """Item i's outputs (the host dropped the first G - 1)."""
        return {n: b.reshape(self.items, -1)[self.groups - 1 + i].ravel() for n, b in out.items()}

    def throughput(self, t: Target, cycles: int, images: int) -> dict:
        return throughput(t, cycles, self.items, self.groups, images)


def throughput(t: Target, cycles: int, items: int, groups: int, images: int) -> dict:
    """A program of `items` pipeline steps took `cycles`: one item (`images` images) a step
    in the steady state; latency: an item through the G groups."""
    step = cycles / items
    return {"latency_ms": round(groups * step / t.clock_hz * 1e3, 6),
            "images_per_s": round(images * t.clock_hz / step, 3), "pipeline_step_cycles": round(step)}


class Ops:
    """The op read-back (compiler/readback.py) inside every group, every pipeline step: a
    ReadBack per group and step on the group's own graph, its dump rows (the chip's tiles
    and addresses) and its data, with what the group's program read in that step: group 0
    the step's image (a padding item's zeros), group k > 0 its input x as the shift left it
    (read from its tiles, as Boundaries reads it). Layer outputs are the boundaries'."""

    def __init__(self, lower_res, ms: list, bounds: "Boundaries", check: str, image_of):
        from .deferred_norm import defer
        d = lower_res.dump
        self.graphs = [defer(m.graph, lower_res.deferred_norm) for m in ms]
        self.data = [m.data for m in ms]
        self.dumps = [{f: v[d["group"] == k] for f, v in d.items() if f != "group"} for k in range(len(ms))]
        self.body, self.check, self.bounds, self.image_of = lower_res.body, check, bounds, image_of
        self.image, self.x = image_name(ms[0].graph), ms[1].graph.repeat.carried[0][1]
        self.step, self.cur, self.done = -1, [], []

    def _start(self, s: int, mem):
        from .pod.run import received_bytes
        from .readback import ReadBack
        self.done += self._finish()
        n = int(np.prod(self.bounds.shape)) * 2
        xs = [received_bytes(mem, rows, n).view(np.float16).reshape(self.bounds.shape) for rows in self.bounds.rows]
        over = [{self.image: self.image_of(s)}] + [{self.x: x} for x in xs]
        self.cur = [(k, ReadBack(g, ChainMap(o, data), dump, self.body, self.check))
                    for k, (g, data, dump, o) in enumerate(zip(self.graphs, self.data, self.dumps, over))]
        self.step = s

    def __call__(self, step, mem):
        s, at = divmod(step, self.bounds.per)
        if s != self.step:
            self._start(s, mem)
        for _, rb in self.cur:
            rb.on_step(at, mem)

    def _finish(self) -> list:
        out = [(self.step, k, rb.metrics()) for k, rb in self.cur]
        self.cur = []
        return out

    def close(self):
        for _, rb in self.cur:
            rb.close()

    def metrics(self) -> dict:
        self.done += self._finish()
        m = {"ops_checked": sum(r["ops_checked"] for *_, r in self.done),
             "ops_failed": sum(r["ops_failed"] for *_, r in self.done)}
        bad = [(s, k, r["first_failed_op"]) for s, k, r in self.done if "first_failed_op" in r]
        if bad:
            s, k, f = bad[0]
            m["first_failed_op"] = {**f, "group": k, "pipeline_step": s}
        return m


class Exchanges:
    """The exchange check (compiler/exchange_check.py: every destination byte against its
    source byte, as the tile graph states the move) after every exchange superstep of every
    pipeline step: the shift between groups and each group's own exchanges, every layer.
    The shift writes where it reads (a middle group's x and y share blocks: the machine
    reads every source before writing), so its sources are taken after the superstep
    before it, the HOST out."""

    def __init__(self, lower_res, per: int, count: int):
        from .exchange_check import ExchangeCheck
        self.make = lambda mem: ExchangeCheck(lower_res.moves, mem.tile_bytes, mem.base)
        self.xc, self.per, self.count, (self.b0, self.b1) = None, per, count, lower_res.body
        self.shift = int(np.max(lower_res.moves["step"])) - 1     # 0-based: the last superstep
        self.sources = None

    def __call__(self, step, mem):
        from .readback import static_step
        self.xc = self.xc or self.make(mem)
        i, static, outside = static_step(step % self.per, self.b0, self.b1, self.count)
        self.xc.on_step(static, i, not outside, mem, self.sources if static == self.shift else None)
        self.sources = self.xc.capture(self.shift, mem) if static == self.shift - 1 else None

    def metrics(self) -> dict:
        return self.xc.metrics() if self.xc else {"exchanges_checked": 0, "exchanges_failed": 0}


class Boundaries:
    """Read-back at every group boundary: after each pipeline step's shift, group k+1's
    input x (read from its tiles through its own host rows) must be layer (k+1) n - 1's
    output of the item it now holds (item s - k at step s), within that layer's
    tolerance (the reference phase's per-layer checkpoints of that item)."""

    def __init__(self, lower_res, ms: list, refs: list, items: int):
        from .pod.link import _rows
        prog = lower_res.program
        b0, b1 = lower_res.body
        from . import isa
        static = int((prog.tile_code(0).view("<u4").reshape(-1, isa.INSTR_WORDS)[:, 0] == isa.SYNC).sum())
        self.per = static + (b1 - b0) * (ms[0].graph.repeat.count - 1)   # supersteps a pipeline step runs
        x = ms[1].graph.repeat.carried[0][1]
        self.rows = [_rows(prog.host_in, prog.in_streams.index(f"g{k}/{x}")) for k in range(1, len(ms))]
        self.shape = ms[1].graph.tensors[x].shape
        self.layers, self.refs, self.items = ms[0].graph.repeat.count, refs, items
        self.checked = self.failed = 0
        self.errors = []

    def __call__(self, step, mem):
        from .pod.run import received_bytes
        s, at = divmod(step, self.per)
        if at != self.per - 1:
            return
        for k, rows in enumerate(self.rows):
            item = s - k
            if not 0 <= item < self.items:
                continue
            layer = (k + 1) * self.layers - 1
            got = received_bytes(mem, rows, int(np.prod(self.shape)) * 2).view(np.float16).reshape(self.shape)
            lay = self.refs[item].layers
            err = float(np.abs(got.astype(np.float64) - lay["values"][layer].astype(np.float64)).max())
            self.checked += 1
            self.failed += not err <= float(lay["tolerance"][layer])
            self.errors.append(err)

    def metrics(self) -> dict:
        return {"boundaries_checked": self.checked, "boundaries_failed": self.failed}

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.checked == self.items * len(self.rows)


def compile_groups(model, t: Target, policy, groups: int, images: int, mapper=mappers.serial):
    """Every phase from plan to lower: (SpatialPlan, ExpandResult, PlaceResult, LowerResult)."""
    from .lower import lower
    from .place.config import PlaceConfig
    from .place.phase import place
    from .schedule import schedule
    sp = plan_phase(model, t, policy, groups, images)
    e = expand_phase(model, sp, t, policy, mapper)
    pl = place(e, t, PlaceConfig.from_dict(policy.place), mapper)
    return sp, e, pl, lower(pl, schedule(pl, t), t, policy.exchange_table_cap)


def run_items(model, lower_res, groups: int, inputs: list, refs: list, t: Target) -> dict:
    """N images (their input tensors; refs: each one's reference phase result) through the
    program in one simulator run: the figures and every image's error."""
    from . import sim
    from .sim.oracle import step_cycles as oracle_steps
    prog = lower_res.program
    host = Host(model, lower_res, groups, inputs, refs)
    hooks = host.hooks()
    try:
        r = sim.run(prog, host, lambda step, mem: [h(step, mem) for h in hooks])
    except BaseException:
        host.close()
        raise
    errors, ok = [], not host.failed()
    for i, ref in enumerate(refs):
        for name, got in host.outputs(r.outputs, i).items():
            want = ref.outputs[name]
            d = np.abs(got.view(np.float16).reshape(want.shape).astype(np.float64) - want.astype(np.float64))
            errors.append(float(d.max()) if np.isfinite(d).all() else float("inf"))
            ok &= errors[-1] <= ref.tolerance
    return dict(validated=bool(ok), errors=errors, **host.metrics(), boundary_errors=host.boundaries.errors,
                cycles=int(r.total_cycles), oracle_cycles=int(oracle_steps(prog).sum()),
                run_images_per_s=round(len(inputs) * t.clock_hz / r.total_cycles, 3),
                **host.throughput(t, int(r.total_cycles), 1))

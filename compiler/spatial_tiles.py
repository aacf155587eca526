"""How many tiles each group of the spatial pipeline gets (policy.pipeline_fit; the pipeline:
compiler/spatial.py).

Every group holds its layers' weights, so a tile's weight bytes are the same at any group
count, and an end group holds more: group G-1 the head (So400m's attention pool and MLP:
about one layer's weights), group 0 the patch embedding. With equal groups (tiles // G each)
a middle group may fit where an end group does not (27 layers, G = 9: the head's group is
~75 KB a tile over on 163 tiles, fits on ~200; the middle groups fit on ~158).

With the flag, when some group does not expand on tiles // G tiles (FIT_REASONS), each group
gets the fewest tiles it expands on (`least`: a bisection of plan + expand over the tile
count, ending on a count it expands on with the one below it failing; groups of one
structure share the search), and the tiles left over are shared in proportion to those
counts (largest remainders, ties to the lower group); a group none of whose finalists then
places with the chip's support asks for 1/64 more (compiler/spatial.py expand_phase). Equal
groups stay equal whenever they all fit: the middle groups set the pipeline step, and the
even split is theirs at its largest. Without the flag, or when the least counts overfill
the chip, the group's own rejection stands (with the counts in its message)."""
from __future__ import annotations

from . import mapper as mappers
from .target import Target

# rejections another tile count may not meet: a tile too full, or no grid on this count whose
# FP8 blocks are whole words (a count's factors decide the grids)
FIT_REASONS = ("memory", "unencodable")


def group_target(t: Target, tiles: int) -> Target:
    return Target.from_dict({**{f: getattr(t, f) for f in t.__dataclass_fields__}, "tiles": tiles})


def structure(mk) -> tuple:
    """What plan and expand see of a group's graph, its scale values aside: groups with the
    same key get the same grids on the same tiles."""
    g = mk.graph
    ops = tuple((op.kind, op.inputs, op.outputs, tuple((k, None if k == "scale" else repr(v)) for k, v in op.attrs))
                for op in g.ops)
    ts = tuple((x.name, tuple(x.shape), x.dtype, x.kind) for x in g.tensors.values())
    return ops, ts, repr(g.repeat)


class Fits:
    """plan + expand of group k on w tiles (each group its own: a tile graph holds its
    layers' scales), and whether it fits, asked once per (structure, count)."""

    def __init__(self, ms: list, t: Target, policy, mapper=mappers.serial):
        self.ms, self.t, self.policy, self.mapper = ms, t, policy, mapper
        self.keys = [structure(m) for m in ms]
        self.done: dict = {}                       # (k, w) -> (PlanResult, ExpandResult)
        self.fitted: dict = {}                     # (structure, w) -> bool

    def __call__(self, k: int, w: int):
        from .expand import ExpandResult, expand
        from .plan import plan
        if (k, w) not in self.done:
            tw = group_target(self.t, w)
            p = plan(self.ms[k], tw, self.policy)
            self.done[k, w] = (p, ExpandResult(rejection=p.rejection) if p.rejection else
                               expand(self.ms[k], p, tw, self.policy, self.mapper))
        return self.done[k, w]

    def ok(self, k: int, w: int) -> bool:
        key = (self.keys[k], w)
        if key not in self.fitted:
            self.fitted[key] = self(k, w)[1].rejection is None
        return self.fitted[key]

    def least(self, k: int, lo: int, hi: int) -> int | None:
        """The fewest tiles in (lo, hi] the group expands on, by bisection (the counts a
        group fits on are nearly but not exactly an interval: grids factor the count);
        None if not even on hi."""
        if not self.ok(k, hi):
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.ok(k, mid) else (mid, hi)
        return hi


def shares(least: list, tiles: int) -> list:
    """Each group its least count, plus the spare tiles in proportion to those counts."""
    spare, total = tiles - sum(least), sum(least)
    extra = [spare * w // total for w in least]
    rest = sorted(range(len(least)), key=lambda k: (-(spare * least[k] % total), k))
    for k in rest[:spare - sum(extra)]:
        extra[k] += 1
    return [w + e for w, e in zip(least, extra)]


def fit(fits: Fits, tiles: int) -> tuple[list, str]:
    """Each group's fewest tiles, when the even split leaves one out: (counts, "") or
    ([], why not); shares() then hands out the rest."""
    G = len(fits.ms)
    even = tiles // G
    most = tiles - (G - 1) * max(1, even // 2)     # the others at half the even split
    least = []
    for k in range(G):
        w = fits.least(k, even // 2, even) if fits.ok(k, even) else fits.least(k, even, most)
        if w is None:
            return [], f"group {k} does not fit on {most} tiles"
        least.append(w)
    return least, over(least, tiles)


def over(least: list, tiles: int) -> str:
    """Why the least counts cannot all be had ("" when they can)."""
    if sum(least) <= tiles:
        return ""
    return (f"the groups fit on no fewer than {', '.join(map(str, least))} tiles, {sum(least)} together, "
            f"over the chip's {tiles}")

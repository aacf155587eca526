"""What plan's beam chooses among and what it may spend: a matmul's feasible grids (Options,
GRID_FIELDS; doubled with a relay or residency choice) and the resident beam's per-tile budgets
(Residency). plan/beam.py searches over them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .matmul import Grid

GRID_FIELDS = ("gg", "gm", "gn", "gk", "gb", "mb", "kb", "nb", "cycles", "mem", "sp")


@dataclass
class Options:
    """The feasible grids of one matmul, best standalone estimate first (int arrays:
    GRID_FIELDS, plus recv and rest from plan/matmul.enumerate_grids)."""
    op: int
    a: dict

    def __len__(self) -> int:
        return len(self.a["gm"])

    def take(self, idx) -> "Options":
        return Options(self.op, {k: v[idx] for k, v in self.a.items()})

    def grid(self, i: int) -> Grid:
        flag = lambda f: int(self.a[f][i]) if f in self.a else 0
        return Grid(*(int(self.a[f][i]) for f in GRID_FIELDS), relay=flag("relay"), ring=flag("ring"),
                    copies=int(self.a["copies"][i]) if "copies" in self.a else 1, inplace=flag("inplace"))


def with_relay(o: Options) -> Options:
    """The grids of o twice: A gathered as laid out (relay 0), then first spread over
    idle tiles (relay 1, plan/relay.py)."""
    a = {k: np.concatenate([v, v]) for k, v in o.a.items()}
    a["relay"] = np.repeat([0, 1], len(o))
    return Options(o.op, a)


def with_resident(o: Options) -> Options:
    """The grids of o twice: B gathered from homes (still 0), then B resident (still 1)."""
    a = {k: np.concatenate([v, v]) for k, v in o.a.items()}
    a["still"] = np.repeat([0, 1], len(o))
    return Options(o.op, a)


@dataclass
class Residency:
    """What the resident (weight-stationary) beam may spend, per tile.

    counts: matmul -> member count of its weight (the matmuls whose weights can stay);
    region1: bytes of region 1 resident weights may take on any one tile;
    memory: bytes of a tile for resident weights, the stationary weights' homes and
    the working set (the tile less the other tensors' homes);
    homes: matmul -> per-tile bytes of its weight's home (count × bytes / tiles: homes
    are rotated to balance);
    base: the home bytes plan/matmul.py's memory figure of a grid includes (the rest
    is the grid's working set);
    shared: split region 1 of all tiles between the weights in proportion to their
    sizes (a first-come split lets the first matmul's cheapest, largest-block grids
    starve the ones after it, which a beam pruned on cost alone never recovers from;
    but at depth the budget pays most where it is concentrated, so plan also runs the
    beam without the split);
    max_rep: the largest replication (gm: each weight block is held by the gm tiles
    of its grid column) of a resident grid, 0 = any (policy.resident_replication)."""
    counts: dict
    region1: int
    memory: int
    homes: dict
    base: int = 0
    shared: bool = True
    max_rep: int = 0

"""The spatial pipeline plan family (issue #27): its shape and its cost (lowered: compiler/spatial.py).

The chip's tiles are cut into G groups, group g holding layers [l_g, l_g + n_g) of the
encoder with their weights resident (no weight gathers) on tiles [t_g, t_g + w_g). Images
(or micro-batches of `batch` images) stream through: in pipeline step s, group g runs its
n_g layers on item s - g, then every group's output shifts to group g + 1 in one exchange
(its rows spread over w_g senders and w_{g+1} receivers). The first group also runs the
patch embedding, the last the final norm and head.

What a step costs is what the slowest group's program costs, plus the shift: the groups
run in the same supersteps (bulk-synchronous), so every group waits for the slowest. A
group's program is the encoder of n_g layers on a w_g-tile target, whose cycles expand
computes exactly (experiments/throughput/groups.py runs it); this file holds only the
arithmetic around those figures, so a test can check it against a step-by-step simulation
of items moving through groups that shares no code with it.

  * split(layers, groups): consecutive layer counts, as even as whole layers allow;
  * tiles_for(tiles, counts): tiles proportional to each group's layers (its work), every
    group at least one tile, all tiles used;
  * shift_cycles: one exchange phase moving a group's output to the next group;
  * steady(step, groups, items): total cycles for `items` items through the pipeline,
    fill and drain counted: (items + groups - 1) steps; latency of one item: groups steps.

Lowered for equal groups by compiler/spatial.py (policy.pipeline_groups): a REPEAT over
pipeline steps around the groups' shared layer REPEAT (compiler/expand/stages.py); this
file's arithmetic is what experiments/throughput/groups.py prices unequal groups with."""
from __future__ import annotations

from dataclasses import dataclass


def split(layers: int, groups: int) -> list[int]:
    """Consecutive layer counts of `groups` groups, the first `layers % groups` one longer."""
    if not 1 <= groups <= layers:
        raise ValueError(f"pipeline groups={groups}: must be between 1 and the layers ({layers})")
    q, r = divmod(layers, groups)
    return [q + (g < r) for g in range(groups)]


def tiles_for(tiles: int, counts: list[int]) -> list[int]:
    """Tiles per group in proportion to its layers (largest remainders, ties to the first
    group), at least one each and summing to `tiles`."""
    if tiles < len(counts):
        raise ValueError(f"pipeline: {len(counts)} groups on {tiles} tiles")
    total = sum(counts)
    base = [max(1, tiles * c // total) for c in counts]
    rem = sorted(range(len(counts)), key=lambda g: (-(tiles * counts[g] % total), g))
    i = 0
    while sum(base) < tiles:
        base[rem[i % len(rem)]] += 1
        i += 1
    while sum(base) > tiles:                       # the max(1, ...) floors overshot
        g = max(range(len(base)), key=lambda k: (base[k], -k))
        base[g] -= 1
    return base


def shift_cycles(t, rows: int, width: int, ebytes: int, senders: int, receivers: int) -> int:
    """One exchange moving a [rows, width] activation from a group of `senders` tiles to
    one of `receivers` tiles (rows spread evenly; the busiest tile sets the phase), plus
    the sync before it."""
    nbytes = rows * width * ebytes
    worst = max(-(-nbytes // senders), -(-nbytes // receivers))
    return t.exchange_phase_cycles + t.sync_cycles + -(-worst // t.exchange_bytes_per_cycle)


@dataclass(frozen=True)
class Steady:
    step: int            # cycles of one pipeline step: the slowest group + the shift
    groups: int
    batch: int           # images per item (micro-batch)

    def total(self, items: int) -> int:
        """Cycles for `items` items, fill and drain counted."""
        return (items + self.groups - 1) * self.step

    @property
    def latency(self) -> int:
        """First image in to its output out, host link excluded: it passes every group."""
        return self.groups * self.step

    def images_per_s(self, clock_hz: float, items: int = 0) -> float:
        """Images per second over `items` items (0: the steady state, one item per step)."""
        cyc = self.total(items) if items else self.step
        return (items or 1) * self.batch * clock_hz / cyc


def steady(group_cycles: list[int], shift: int, batch: int = 1) -> Steady:
    return Steady(max(group_cycles) + shift, len(group_cycles), batch)

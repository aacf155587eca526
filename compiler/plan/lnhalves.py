"""policy.ln_halves: a LayerNorm over rows split in two column halves on two tiles.

Why: with whole rows a So400m LayerNorm (729 rows of 1,152) runs one row on each of 730
tiles, 742 idle, and its cost (5,923 cycles) is mostly PopLibs' per-vertex overheads over
one row (experiments/comm/README.md, "vector gap"). Halves put the rows on 1,460 tiles:
each runs the reductions of its 576 columns (LAYERNORM F_LN_STATS: f32 mean and sum of
squared deviations), an exchange superstep swaps the two halves' 8 bytes a row, and each
finishes its half (F_LN_HALF: the whole row's statistics from both, then whiten, gamma,
beta over its columns). It costs one more exchange superstep and sync, and pays where the
half-width vertices save more (isa.py; prices: compiler/costs/vector.py layernorm_cycles).

The beam (plan/beam.py step) prices both layouts of each LayerNorm in its state and keeps
the cheaper; beam.replay_halves re-walks a found choice to name the LayerNorms that took
halves (Candidate.halves, which expand/lnhalves.py lowers)."""
from __future__ import annotations

import numpy as np

from .homes import spread, starts

HALVES = ("halves",)       # layout descriptor: row halves, two tiles a row block
STATS_BYTES = 8            # a row half's f32 (mean, M2)


def fits(cols: int, ebytes: int) -> bool:
    """Halves of whole 8-byte words (the kernels' operand alignment) with a f16 row."""
    return cols % 2 == 0 and (cols // 2 * ebytes) % 8 == 0


def halves_grid(rows: int, T: int):
    """(row starts, tiles int64[row blocks, 2]): min(rows, T // 2) row blocks, each's two
    halves on two tiles, spread over all T."""
    rs = starts(rows, max(1, T // 2))
    return rs, spread(2 * len(rs), T).reshape(-1, 2)


def halves_blocks(rows: int, cols: int, T: int):
    """The layout as blocks (r0, nr, c0, nc, tile) (plan/layouts.py)."""
    rs, tiles = halves_grid(rows, T)
    nr = np.diff(np.append(rs, rows))
    h = cols // 2
    r0 = np.repeat(rs, 2)
    return r0, np.repeat(nr, 2), np.tile([0, h], len(rs)), np.tile([h, cols - h], len(rs)), tiles.ravel()


def halves_cycles(t, rows: int, cols: int) -> int:
    """The busiest tile's two kernels, the statistics' exchange superstep and the sync of the
    compute superstep it splits off (as plan/beam.py's convert counts a superstep)."""
    rs, _ = halves_grid(rows, t.tiles)
    r = int(np.diff(np.append(rs, rows)).max())
    h = cols // 2
    swap = t.exchange_phase_cycles + -(-STATS_BYTES * r // t.exchange_bytes_per_cycle)
    return int(t.layernorm_cycles(r, h, 1) + t.layernorm_cycles(r, h, 2)) + swap + 2 * t.sync_cycles


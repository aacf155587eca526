"""MachineFault: what the simulated machine raises when it refuses a program.

A fault names where the machine was (tile, superstep, pc) so a failing trial can
be traced back to one instruction of one tile's lowered code.
"""
from __future__ import annotations


class MachineFault(Exception):
    def __init__(self, message: str, tile: int | None = None, step: int | None = None,
                 pc: int | None = None, phase: str | None = None):
        self.tile = None if tile is None else int(tile)
        self.step = None if step is None else int(step)
        self.pc = None if pc is None else int(pc)
        self.phase = phase
        self.reason = message
        where = []
        if self.tile is not None:
            where.append(f"tile {self.tile}")
        if self.step is not None:
            where.append(f"superstep {self.step}")
        elif phase:
            where.append(phase)
        if self.pc is not None:
            where.append(f"pc {self.pc}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


def first_fault(bad, message, tiles=None, step=None, pcs=None, phase=None):
    """Raise for the first True of a vectorised check (instances are kept in tile
    order, so the lowest faulting tile is reported). `message(i)` builds the text
    for instance i lazily: checks run on whole arrays, text only on failure."""
    import numpy as np
    hit = np.flatnonzero(bad)
    if len(hit):
        i = int(hit[0])
        raise MachineFault(message(i),
                           tile=None if tiles is None else tiles[i],
                           step=step,
                           pc=None if pcs is None else pcs[i],
                           phase=phase)

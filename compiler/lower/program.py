"""The lowered program: everything the simulator (the "hardware") receives.

Per-tile blobs are struct-of-arrays: one flat uint8 buffer plus offsets, so tile t's
code is code[code_off[t]:code_off[t+1]], loaded at code_addr[t]. The host side is a
list of stream descriptors (symbolic rows, never one object per row):

  host_in row i:  copy `rows` rows of `row_bytes` from host stream `stream`
                  (starting at host_off, rows host_stride apart) to tile `tile`
                  at `addr` (rows tile_stride apart), before the first superstep.
  host_out row i: the reverse, after the last superstep.
  step_in / step_out: the same rows, moved only when a HOST instruction names them
  (isa.py), each time at host_off + that instruction's delta: a stream read or written
  item by item inside a loop.

Streams are named host buffers of raw bytes (inputs and parameters in; outputs out).
A stream in `in_panels` is sent rearranged on the host (as Poplar's rearrange-on-host
streams are): its consecutive [rows, cols] matrices of `ebytes` elements in AMP
micro-panel order of height P (isa.panel_order), and host_in offsets address that order.
Nothing here refers to the graph or the reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

HOST_FIELDS = ("stream", "host_off", "tile", "addr", "row_bytes", "rows", "host_stride", "tile_stride")


def host_table(rows: list[tuple] | None = None) -> dict[str, np.ndarray]:
    """Host descriptors as a struct of int64 arrays (fields HOST_FIELDS)."""
    a = np.asarray(rows if rows else np.zeros((0, len(HOST_FIELDS))), np.int64).reshape(-1, len(HOST_FIELDS))
    return {f: a[:, i].copy() for i, f in enumerate(HOST_FIELDS)}


@dataclass
class Program:
    target: dict                     # the target config (compiler.target.Target fields)
    exchange_table_cap: int          # policy cap on encoded exchange-table bytes per tile
    code: np.ndarray                 # uint8[total]
    code_off: np.ndarray             # int64[tiles+1]
    code_addr: np.ndarray            # int64[tiles]
    table: np.ndarray                # uint8[total]
    table_off: np.ndarray            # int64[tiles+1]
    table_addr: np.ndarray           # int64[tiles]
    profile_addr: np.ndarray         # int64[tiles]; one uint32 per superstep is written there
    profile_bytes: int               # bytes reserved per tile for profile samples
    in_streams: list[str]            # host input stream names (index = host_in["stream"])
    out_streams: dict[str, int] = field(default_factory=dict)  # output name -> bytes
    in_panels: dict = field(default_factory=dict)   # input name -> (rows, cols, ebytes, P): sent in panel order
    host_in: dict = field(default_factory=host_table)
    host_out: dict = field(default_factory=host_table)   # "stream" indexes list(out_streams)
    step_in: dict = field(default_factory=host_table)    # rows HOST instructions move (dir 0)
    step_out: dict = field(default_factory=host_table)   # (dir 1)

    @property
    def tiles(self) -> int:
        return len(self.code_addr)

    def tile_code(self, t: int) -> np.ndarray:
        return self.code[self.code_off[t]:self.code_off[t + 1]]

    def tile_table(self, t: int) -> np.ndarray:
        return self.table[self.table_off[t]:self.table_off[t + 1]]

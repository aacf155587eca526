"""A tiny test-only assembler: builds Programs by hand for the simulator tests.

Every tile gets the same superstep structure: `on(tiles, op, *args, dtype=,
dtype2=, flags=)` appends an instruction to some tiles' current superstep,
`sync()` closes the superstep on all tiles, `build()` appends END everywhere.
Tables are flat uint32 words per tile: `exch` appends entries (address in
`last_table`), `reloc_table` a REPEAT relocation table; `pc` / `code_word` give
instruction and word addresses for relocation entries. Default layout on the tiny target
(region 0 = elements 0..3, region 1 = element pairs 4..7):
  code     0x4C000 (element 0)        tables  0x50000 (element 1)
  data     0x54000.. (elements 2, 3)   and region 1 0x5C000..0x7C000
  profile  last 256 B of region 1 (64 samples)
"""
from __future__ import annotations

from dataclasses import asdict

import numpy as np

from compiler import isa
from compiler.lower.program import HOST_FIELDS, Program, host_table
from compiler.target import Target

TINY = Target.load("tiny")
CODE = 0x4C000
TABLE = 0x50000
R0_DATA = 0x54000     # element 2
R0_DATA2 = 0x58000    # element 3
R1 = 0x5C000          # region 1, unit 4 (element pair)
R1_B = 0x64000        # region 1, unit 5
PROFILE_BYTES = 256
PROFILE = TINY.memory_end - PROFILE_BYTES


class Asm:
    def __init__(self, target: Target = TINY, table_cap: int = 80 * 1024):
        self.t = target
        T = target.tiles
        self.T = T
        self.code = [[] for _ in range(T)]
        self.tables = [[] for _ in range(T)]
        self.code_addr = np.full(T, CODE, np.int64)
        self.table_addr = np.full(T, TABLE, np.int64)
        self.profile_addr = np.full(T, PROFILE, np.int64)
        self.profile_bytes = PROFILE_BYTES
        self.table_cap = table_cap
        self.in_streams: list[str] = []
        self.out_streams: dict[str, int] = {}
        self.in_panels: dict[str, tuple] = {}     # Program.in_panels: streams the host sends in panel order
        self.hin: list[tuple] = []
        self.hout: list[tuple] = []

    def _tiles(self, tiles):
        return range(self.T) if tiles is None else ([tiles] if np.isscalar(tiles) else tiles)

    def on(self, tiles, op, *args, dtype=None, dtype2=None, flags=0):
        for t in self._tiles(tiles):
            self.code[t].append(isa.instr(op, *args, dtype=dtype, dtype2=dtype2, flags=flags))
        return self

    def pc(self, tile) -> int:
        """The pc the next instruction appended to `tile` will have."""
        return len(self.code[tile])

    def code_word(self, tile, pc, word) -> int:
        """Absolute address of word `word` of instruction `pc` on `tile`."""
        return int(self.code_addr[tile]) + pc * isa.INSTR_BYTES + 4 * word

    def table_words(self, tile, words) -> int:
        """Append raw uint32 words to the tile's table blob; returns their address."""
        addr = int(self.table_addr[tile]) + 4 * len(self.tables[tile])
        self.tables[tile] += [int(x) & 0xFFFFFFFF for x in words]
        return addr

    def reloc_table(self, tile, entries) -> int:
        """A REPEAT relocation table ((word address, stride) pairs) in the table blob."""
        return self.table_words(tile, [x for e in entries for x in e])

    def raw(self, tile, words):
        self.code[tile].append(np.asarray(words, np.uint32))
        return self

    def sync(self):
        return self.on(None, isa.SYNC)

    def matmul(self, tiles, a, b, out, m, k, n, scale=1.0, dtype="f16", dtype2=None, flags=0):
        return self.on(tiles, isa.MATMUL, a, b, out, m, k, n, isa.f32_bits(scale), dtype=dtype,
                       dtype2=dtype2, flags=flags)

    def exch(self, tile, sends=(), recvs=()):
        """Append one EXCH on `tile` whose entries (5-tuples, isa order) go at the end
        of the tile's table. Returns self; self.last_table is the entries' address."""
        words = [x for e in list(sends) + list(recvs) for x in e]
        self.last_table = addr = self.table_words(tile, words)
        return self.on(tile, isa.EXCH, addr, len(sends), len(recvs))

    def stream_in(self, name, rows):
        """rows: (host_off, tile, addr, row_bytes, rows, host_stride, tile_stride)."""
        if name not in self.in_streams:
            self.in_streams.append(name)
        s = self.in_streams.index(name)
        self.hin += [(s, *r) for r in rows]
        return self

    def stream_out(self, name, nbytes, rows):
        if name not in self.out_streams:
            self.out_streams[name] = nbytes
        s = list(self.out_streams).index(name)
        self.hout += [(s, *r) for r in rows]
        return self

    def build(self) -> Program:
        code = [np.concatenate(c + [isa.instr(isa.END)]).astype("<u4").view(np.uint8) for c in self.code]
        tabs = [np.asarray(t, np.int64).reshape(-1).astype("<u4").view(np.uint8) for t in self.tables]
        off = lambda blobs: np.r_[0, np.cumsum([len(b) for b in blobs])].astype(np.int64)
        assert len(HOST_FIELDS) == 8
        return Program(target=asdict(self.t), exchange_table_cap=self.table_cap,
                       code=np.concatenate(code), code_off=off(code), code_addr=self.code_addr.copy(),
                       table=np.concatenate(tabs) if tabs else np.zeros(0, np.uint8), table_off=off(tabs),
                       table_addr=self.table_addr.copy(), profile_addr=self.profile_addr.copy(),
                       profile_bytes=self.profile_bytes, in_streams=list(self.in_streams),
                       out_streams=dict(self.out_streams), in_panels=dict(self.in_panels),
                       host_in=host_table(self.hin),
                       host_out=host_table(self.hout))


def put(tiles, addr, data: np.ndarray, asm: Asm, name: str):
    """Host-load the same array at `addr` on each of `tiles` from stream `name`
    (one contiguous row per tile). Returns the stream bytes to pass to run()."""
    b = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    asm.stream_in(name, [(0, t, addr, len(b), 1, len(b), len(b)) for t in tiles])
    return b


def get(res, name, dtype, shape):
    return res.outputs[name].view(dtype).reshape(shape)

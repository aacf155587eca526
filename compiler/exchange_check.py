"""Exchange check: in every Repeat iteration, every exchange's destination bytes against
its source's, as the tile graph states the move (issue #23; docs/architecture.md §3.7).

Why. The op read-back (readback.py) reads each op's output where its producer placed it
and, under policy.check=rows, only every 32nd row of it per iteration. A fault in what an
exchange delivers -- 156 stale bytes of the previous layer left on one tile, a dropped
row, two rows swapped -- lives only in a received copy no read-back reads, and changes
only the rows of the consumer's output that come from it: at So400m size such faults were
missed whenever those rows were not sampled and their effect stayed under the layer
and output tolerances (experiments/planted/table-full.md before this check). Data
movement is exact, so its check is too: after each exchange superstep, every destination
byte must equal the source byte it was sent from. No bound, no false alarm, and every
byte of every copy of every iteration is compared.

Independent of what it checks. The statement of what must move is the tile graph's
transfer rows (expand: step, source and destination tile, request + offset, each side's
row shape, the per-iteration source relocation) with the placement's addresses, passed
by lower beside its program as `LowerResult.moves` -- never the program's encoded
exchange tables, which are what the simulator executes (a check built from them cannot
see a bug in them). The walk over both sides' rows is written here (compare_moves), not
the simulator's chunk splitting (sim.memory.chunk_offsets / move_pairs).

Timing. The host calls on_step after every executed superstep, before the next one
runs, with the memory as that superstep left it: the sources are not yet overwritten
(an exchange reads what the superstep before it left, and the allocator never gives a
buffer read by an exchange the address of one that exchange writes). The one exchange
that writes where it reads, a spatial pipeline's shift (a middle group's input and output
share blocks; the machine reads every source before writing), is compared against its
sources as `capture` took them after the superstep before it (compiler/spatial.py). The
compare is one compiled pass over the moved bytes, on the simulator's thread (it reads
live memory).

What it cannot see: a kernel computing wrongly from correct operands (the op read-back's
and the layer-output check's), and a wrong source (the op read-back reads the producer's
output where it lies).
"""
from __future__ import annotations

import numpy as np
from .numba_probe import njit     # numba without its scipy.linalg probe

FIELDS = ("step", "src", "saddr", "dst", "daddr", "s_row_bytes", "s_rows", "s_stride",
          "d_row_bytes", "d_rows", "d_stride", "reloc", "name")


@njit(nogil=True, cache=True, boundscheck=False)
def compare_moves(flat, tile_bytes, base, shift, src, saddr, srb, srows, sstride,
                  dst, daddr, drb, drows, dstride, out):
    """out[j] = how many bytes of transfer j differ between its destination and its source
    (source address + shift[j]); both sides walked row by row, the stream of bytes one
    side's rows hold in order being the other's. The inner loop indexes with unsigned
    integers: numba then drops its negative-index wraparound and LLVM vectorises the loop
    (3.4x faster than signed: 4.7 against 1.4 GiB/s, 176 MiB of 2,304-byte rows at random addresses).
    It counts runs of at most 255 bytes in a uint8, cast back after each add (numba types
    uint8 arithmetic as int64), so the vector lanes stay one byte wide: on AVX2 2.0x faster
    again on 2,304-byte rows, 1.8x on 96, 1.2x on 16 (experiments/host_time/compare_moves_bench.py)."""
    for j in range(len(src)):
        s0 = np.int64(src[j]) * tile_bytes + saddr[j] + shift[j] - base
        d0 = np.int64(dst[j]) * tile_bytes + daddr[j] - base
        left = np.int64(srb[j]) * srows[j]      # columns may be int32 (ExchangeCheck)
        si = so = di = do = 0
        bad = 0
        while left > 0:
            n = min(srb[j] - so, drb[j] - do, left)
            ps = np.uint64(s0 + si * sstride[j] + so)
            pd = np.uint64(d0 + di * dstride[j] + do)
            q = np.uint64(0)
            while q < np.uint64(n):
                m = min(np.uint64(n) - q, np.uint64(255))
                c = np.uint8(0)
                for r in range(m):
                    c = np.uint8(c + np.uint8(flat[ps + q + r] != flat[pd + q + r]))
                bad += c
                q += m
            so += n
            do += n
            left -= n
            if so == srb[j]:
                si, so = si + 1, 0
            if do == drb[j]:
                di, do = di + 1, 0
        out[j] = bad


def _compact(a: np.ndarray) -> np.ndarray:
    """a as contiguous int32 when every value fits, else int64."""
    i32 = np.iinfo(np.int32)
    fits = not len(a) or (int(a.min()) >= i32.min and int(a.max()) <= i32.max)
    return np.ascontiguousarray(a, np.int32 if fits else np.int64)


class ExchangeCheck:
    """Per executed superstep: the transfers of its static step, compared (see above)."""

    def __init__(self, mv: dict, tile_bytes: int, base: int):
        m = {k: np.asarray(mv[k]) for k in FIELDS}
        self.names = mv.get("names", [])
        sb, db = (m["s_row_bytes"].astype(np.int64) * m["s_rows"], m["d_row_bytes"].astype(np.int64) * m["d_rows"])
        if not np.array_equal(sb, db):
            j = int(np.flatnonzero(sb != db)[0])
            raise ValueError(f"lower's moves: transfer {j} (step {m['step'][j]}) sends and receives different byte counts")
        del sb, db
        order = np.argsort(m["step"], kind="stable")
        # held for the whole run (13 columns of ~1.3 M transfers at 27 layers): int32 where
        # every value fits (checked), one column converted at a time; compare_moves widens
        # each to int64 as it reads it
        self.mv = {k: _compact(v[order]) for k, v in m.items()}
        steps = self.mv["step"]
        self.at = {int(s): (int(a), int(b)) for s, a, b in
                   zip(*np.unique(steps, return_index=True), np.searchsorted(steps, np.unique(steps), "right"))}
        self.tile_bytes, self.base = tile_bytes, base
        self.checked = self.failed = self.bytes = 0
        self.first_failed: dict | None = None

    def _stream(self, mem, tile, addr, row_bytes, rows, stride) -> np.ndarray:
        at = int(tile) * self.tile_bytes + int(addr) - self.base
        return mem.flat[at + (np.arange(int(rows), dtype=np.int64)[:, None] * int(stride)
                              + np.arange(int(row_bytes), dtype=np.int64)).ravel()]

    def capture(self, static: int, mem) -> list:
        """The source bytes of static step `static`'s transfers (0-based; outside a Repeat
        body) as memory holds them now: for an exchange that writes where it reads (a
        pipeline's shift, compiler/spatial.py Exchanges), taken after the superstep before
        it, and handed to its on_step as `sources`."""
        a, b = self.at.get(static + 1, (0, 0))
        m = self.mv
        return [self._stream(mem, m["src"][j], m["saddr"][j], m["s_row_bytes"][j], m["s_rows"][j], m["s_stride"][j])
                for j in range(a, b)]

    def on_step(self, static: int, iteration: int, in_body: bool, mem, sources: list | None = None) -> None:
        """After executed superstep of 0-based static step `static` in `iteration`; `sources`:
        its transfers' source bytes as capture() took them before it ran."""
        span = self.at.get(static + 1)          # transfer rows number steps from 1
        if span is None:
            return
        a, b = span
        m = {k: v[a:b] for k, v in self.mv.items()}
        shift = m["reloc"].astype(np.int64) * (iteration if in_body else 0)
        out = np.zeros(b - a, np.int64)
        if sources is not None:                 # each destination's byte stream against the source's
            for j, src in enumerate(sources):
                got = self._stream(mem, m["dst"][j], m["daddr"][j], m["d_row_bytes"][j], m["d_rows"][j],
                                   m["d_stride"][j])
                out[j] = int((got != src).sum())
        else:
            compare_moves(mem.flat, self.tile_bytes, self.base, shift, m["src"], m["saddr"], m["s_row_bytes"],
                          m["s_rows"], m["s_stride"], m["dst"], m["daddr"], m["d_row_bytes"], m["d_rows"],
                          m["d_stride"], out)
        self.checked += b - a
        self.bytes += int((m["s_row_bytes"].astype(np.int64) * m["s_rows"]).sum())
        bad = np.flatnonzero(out)
        if not len(bad):
            return
        self.failed += len(bad)
        if self.first_failed is None:
            j = int(bad[0])
            name = int(m["name"][j])
            self.first_failed = dict(step=static + 1, iteration=iteration, tile=int(m["dst"][j]),
                                     src_tile=int(m["src"][j]),
                                     buffer=self.names[name] if name < len(self.names) else str(name),
                                     bytes_wrong=int(out[j]), bytes=int(m["s_row_bytes"][j]) * int(m["s_rows"][j]),
                                     transfers_wrong=len(bad))

    def metrics(self) -> dict:
        m = {"exchanges_checked": self.checked, "exchanges_failed": self.failed, "exchange_bytes_checked": self.bytes}
        if self.first_failed:
            m["first_failed_exchange"] = self.first_failed
        return m

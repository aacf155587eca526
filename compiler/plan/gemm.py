"""GEMM strategies: tile grids over (m, n, k), costed in cycles and screened for
per-tile memory, all grids at once with numpy.

Grid (gm, gn, gk): tile (i, j, l) computes the partial A[i, l]·B[l, j] of an
mb×nb output block over a kb slice of k. With gk > 1 the partials are reduced:
tile l of a block sums rows [l·rr, (l+1)·rr) of the gk partials (rr = ⌈mb/gk⌉).
Operands reach the grid from their homes (rows spread over all tiles) by exchange.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..target import DTYPE_BYTES, Target

OUT_BYTES = 2  # f16 partials and output


@dataclass(frozen=True)
class GemmCandidate:
    gm: int
    gn: int
    gk: int
    mb: int
    kb: int
    nb: int
    cycles: int          # estimate; expand computes the exact figure
    mem_bytes: int       # screened peak bytes on the fullest tile

    @property
    def tiles(self) -> int:
        return self.gm * self.gn * self.gk

    @property
    def label(self) -> str:
        return f"grid {self.gm}x{self.gn}x{self.gk} blocks {self.mb}x{self.kb}x{self.nb}"


def reduce_rows(mb, gk):
    """Rows each of the gk reducers of a block sums: even, so that every reducer's
    slice of an f16 partial (rows × an even number of columns × 2 B) starts 8-byte
    aligned, as ADD requires."""
    return 2 * -(-mb // (2 * gk))


def block_options(d: int, q: int, limit: int) -> np.ndarray:
    """Distinct block sizes (multiples of q, except a whole dimension) and their counts."""
    units = -(-d // q)
    g = np.arange(1, min(units, limit) + 1)
    b = np.unique(np.minimum(-(-units // g) * q, d))
    return b


def enumerate_grids(m: int, k: int, n: int, dtype: str, t: Target):
    """All grids with their estimated cycles, peak memory and rejection reason."""
    word = 4 // DTYPE_BYTES[dtype] if DTYPE_BYTES[dtype] < 4 else 1
    mb, kb, nb = np.meshgrid(block_options(m, 1, t.tiles), block_options(k, word, t.tiles),
                             block_options(n, word, t.tiles), indexing="ij")
    mb, kb, nb = mb.ravel(), kb.ravel(), nb.ravel()
    gm, gk, gn = -(-m // mb), -(-k // kb), -(-n // nb)
    fits_grid = gm * gn * gk <= t.tiles
    mb, kb, nb, gm, gk, gn = (x[fits_grid] for x in (mb, kb, nb, gm, gk, gn))
    b = DTYPE_BYTES[dtype]
    T = t.tiles
    bw = t.exchange_bytes_per_cycle

    # ---- cycles -------------------------------------------------------------
    a_blk, b_blk, p_blk = mb * kb * b, kb * nb * b, mb * nb * OUT_BYTES
    used = gm * gn * gk
    recv_in = a_blk + b_blk
    send_in = -(-(used * recv_in) // T)
    ex_in = t.exchange_phase_cycles + -(-np.maximum(recv_in, send_in) // bw)
    mm = t.kernel_overhead_cycles + -(-(mb * kb * nb) // t.amp_macs_per_cycle[dtype])
    rr = reduce_rows(mb, gk)
    red = (gk - 1) * rr * nb * OUT_BYTES
    reducing = gk > 1
    ex_red = reducing * (t.exchange_phase_cycles + -(-red // bw))
    add = reducing * (t.kernel_overhead_cycles + -(-((gk + 1) * rr * nb * OUT_BYTES) // t.vector_bytes_per_cycle))
    steps = np.where(reducing, 4, 2)
    cycles = ex_in + mm + ex_red + add + steps * t.sync_cycles

    # ---- memory screen (fullest tile) ---------------------------------------
    homes = -(-m // T) * k * b + -(-k // T) * n * b
    c_blk = rr * nb * OUT_BYTES
    peak = np.maximum.reduce([a_blk + b_blk + p_blk, p_blk + red + c_blk * reducing])
    entries = 2 * (mb + kb + gk + 2)          # worst case: one table entry per home row
    support = (2 * steps + 4) * 32 + entries * 20 + 4 * (steps + 1)
    mem = homes + peak + support + 5 * 16     # alignment slack of the five buffers
    reason = np.full(len(mb), "", dtype=object)
    reason[mem > t.tile_bytes] = "memory"
    region1 = t.memory_end - t.region0_end
    too_big = (b_blk > region1) | (np.maximum(a_blk, p_blk) > t.max_alloc_bytes)
    reason[too_big] = "max_alloc"
    return dict(gm=gm, gn=gn, gk=gk, mb=mb, kb=kb, nb=nb, cycles=cycles, mem=mem, reason=reason,
                rejected_grid=int((~fits_grid).sum()))


def plan_gemm(m: int, k: int, n: int, dtype: str, t: Target, keep: int, grid: tuple = ()):
    g = enumerate_grids(m, k, n, dtype, t)
    ok = g["reason"] == ""
    if grid:   # a forced grid: every other grid is set aside (not counted as rejected)
        ok &= (g["gm"] == grid[0]) & (g["gn"] == grid[1]) & (g["gk"] == grid[2])
    rejected = {"tiles": g["rejected_grid"]}
    for r in ("memory", "max_alloc"):
        rejected[r] = int((g["reason"] == r).sum())
    order = np.lexsort((g["gk"], g["gn"], g["gm"], g["mem"], g["cycles"]))  # deterministic
    order = order[ok[order]][:keep]
    cands = [GemmCandidate(*(int(g[f][i]) for f in ("gm", "gn", "gk", "mb", "kb", "nb", "cycles", "mem")))
             for i in order]
    best_mem = int(g["mem"].min()) if len(g["mem"]) else 0
    return cands, rejected, len(g["mb"]) + g["rejected_grid"], best_mem

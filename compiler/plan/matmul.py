"""Matmul strategies: tile grids over (groups, m, n, k), costed in cycles and screened
for per-tile memory, all grids of an op at once with numpy.

A matmul op computes G independent products (attention heads are groups; a plain
GEMM has G = 1): C_g[M, N] = A_g[M, K] · B_g[K, N] (B_g stored [N, K] when transposed).
Grid (gg, gm, gn, gk): tile (q, i, j, l) computes the partials of the groups of chunk
q for output block (i, j) over the k slice l. With gk > 1 the partials are reduced:
tile l of a block sums rows [l·rr, (l+1)·rr) of the gk partials (rr = reduce_rows).

Serial passes (sp > 1, ungrouped matmuls, policy.serial_passes): the rows are cut
into sp token blocks processed one after another on the same tiles, each pass its
own exchange and compute supersteps (B gathered once, in the first). A pass holds
1/sp of the A block and of the partials: supersteps traded for working memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..target import DTYPE_BYTES, Target

OUT_BYTES = 2  # f16 partials and outputs


@dataclass(frozen=True)
class Grid:
    gg: int
    gm: int
    gn: int
    gk: int
    gb: int          # groups per chunk
    mb: int
    kb: int
    nb: int
    cycles: int      # estimate; expand computes the exact figure
    mem_bytes: int   # screened bytes on the fullest tile
    sp: int = 1      # serial passes over the rows (mb, gm are per pass)
    rot: int = 0     # first tile: grid tile t runs on tile (t + rot) mod T (resident weights: balance)
    relay: int = 0   # 1: A is first spread over idle tiles (plan/relay.py, policy.operand_relay)
    ring: int = 0    # 1: B's home is this grid, each block in pieces over its gm tiles (plan/ring.py)
    copies: int = 1  # ring: each piece held by this many of the gm tiles (policy.ring_copies)
    inplace: int = 0  # ring: pieces each read where it lives by a MATMUL with b in segments (no
    #                   local COPY; policy.ring_in_place): 1 column pieces of whole out-channel
    #                   groups, 2 row pieces (along k) of whole in-channel groups and panels,
    #                   3 pieces of whole (in-group x out-group) units (policy.ring_units)

    @property
    def tiles(self) -> int:
        return self.gg * self.gm * self.gn * self.gk

    @property
    def label(self) -> str:
        g = f"{self.gg}x" if self.gg > 1 else ""
        return (f"{g}{self.gm}x{self.gn}x{self.gk}" + (f"/{self.sp}" if self.sp > 1 else "")
                + (f"@{self.rot}" if self.rot else "") + ("~relay" if self.relay else "")
                + ("~ring" if self.ring else "") + (str(self.copies) if self.ring and self.copies > 1 else "")
                + ({1: "i", 2: "k", 3: "u"}.get(self.inplace, "") if self.ring else ""))


def partial_bytes(f32: bool, gk, amp: str):
    """Bytes of an element of a matmul's partials: 4 where a k-split (gk > 1) keeps them
    in f32 (policy.f32_partials: MATMUL F_F32_OUT, no output cast, exchanged as f32, an
    ADD of f32 sources rounding once to f16, as PopLibs' conv partials with a reduction),
    else OUT_BYTES. Not for an FP8 x FP8 product (`amp` fp8): PopLibs' QUARTER AMP vertex
    has only half partials. Accepts numpy arrays for gk."""
    return np.where(np.asarray(gk) > 1, 4 if f32 and amp != "fp8" else OUT_BYTES, OUT_BYTES)


def reduce_rows(mb, gk, nb=2, n=2):
    """Rows each of the gk reducers of a block sums: ⌈mb / gk⌉ rounded up to the row
    quantum that keeps every reducer's slice of an f16 partial 8-byte aligned, as ADD
    requires: a slice starts at rows × cols × 2 B, so any row count does when every
    column block of the grid (nb wide, the last n − (gn − 1)·nb) is a multiple of 4
    columns, else an even one (columns are even: plan's quantum). The even rule alone
    (nb, n left out) put 10 rows on a P·V reducer where 9 do (So400m's 82-row blocks
    over 10 key splits: the busiest reducer's ADD and received partials 10 % larger).
    Accepts numpy arrays."""
    nb, n = np.asarray(nb), np.asarray(n)
    last = n - (-(-n // nb) - 1) * nb
    q = np.where((nb % 4 == 0) & (last % 4 == 0), 1, 2)
    rr = q * -(-np.asarray(mb) // (q * np.asarray(gk)))
    return int(rr) if rr.ndim == 0 else rr


def block_options(d: int, q: int, limit: int) -> np.ndarray:
    """Distinct block sizes along a dimension of d: multiples of q (or all of d)."""
    units = -(-d // q)
    g = np.arange(1, min(units, limit) + 1)
    return np.unique(np.minimum(-(-units // g) * q, d))


def word_elems(dtype: str) -> int:
    """Elements per 32-bit word: rows moved by exchange are whole words."""
    return max(1, 4 // DTYPE_BYTES[dtype])


def _grids(G: int, M: int, K: int, N: int, a_dtype: str, b_dtype: str, transpose_b: bool,
           t: Target, home_bytes: int, sp: int, panel: int, home_r1: int = 0, f32_partials: bool = False,
           normalise: bool = False):
    """The grids of `sp` serial passes (see enumerate_grids)."""
    if panel:   # b in micro-panels: k blocks of whole panels, any (even: f16 outputs) n
        qk, qn = max(panel, word_elems(a_dtype)), 2
    else:
        qk = max(word_elems(a_dtype), word_elems(b_dtype) if transpose_b else 1)
        qn = max(2, 1 if transpose_b else word_elems(b_dtype))
    Mp = -(-M // sp)                                  # rows per pass
    opts = [block_options(G, 1, t.tiles), block_options(Mp, 1, t.tiles),
            block_options(K, qk, t.tiles), block_options(N, qn, t.tiles)]
    gb, mb, kb, nb = (x.ravel() for x in np.meshgrid(*opts, indexing="ij"))
    gg, gm, gk, gn = -(-G // gb), -(-Mp // mb), -(-K // kb), -(-N // nb)
    fits = gg * gm * gn * gk <= t.tiles
    gb, mb, kb, nb, gg, gm, gk, gn = (x[fits] for x in (gb, mb, kb, nb, gg, gm, gk, gn))
    ea, eb = DTYPE_BYTES[a_dtype], DTYPE_BYTES[b_dtype]
    T, bw = t.tiles, t.exchange_bytes_per_cycle
    pe = partial_bytes(f32_partials, gk, t.amp_dtype(b_dtype, a_dtype))    # 4: f32 partials
    a_blk, b_blk, p_blk = gb * mb * kb * ea, gb * kb * nb * eb, gb * mb * nb * pe
    recv_in = a_blk + b_blk
    send_in = -(-(gg * gm * gn * gk * recv_in) // T)
    ex_in = t.exchange_phase_cycles + -(-np.maximum(recv_in, send_in) // bw)
    ex_later = (sp - 1) * (t.exchange_phase_cycles + -(-np.maximum(a_blk, -(-(gg * gm * gn * gk * a_blk) // T)) // bw))
    mm = gb * t.matmul_cycles(mb, kb, nb, b_dtype, a_dtype, pe == 4)      # f32 partials: no cast
    rr = reduce_rows(mb, gk, nb, N)
    red = gb * (gk - 1) * rr * nb * pe
    reducing = gk > 1
    if normalise:   # policy.deferred_norm: the finishing tile's f32 row sums (8-byte slots a group) ride the
        fin = np.where(reducing, rr, mb)           # reduction's exchange (else the operands'), and a ROWSCALE
        sums = gb * -(-fin * 4 // 8) * 8           # F_RECIP a group divides its output rows (expand/matmul.py)
        red = red + reducing * sums
        recv_in = recv_in + (~reducing) * sums
        send_in = -(-(gg * gm * gn * gk * recv_in) // T)
        ex_in = t.exchange_phase_cycles + -(-np.maximum(recv_in, send_in) // bw)
    ex_red = reducing * (t.exchange_phase_cycles + -(-red // bw))
    add = reducing * gb * t.add_cycles(rr * nb, gk - 1, pe == 4)      # src0 + gk - 1 partials
    if normalise:
        add = add + gb * t.rowscale_cycles(fin, nb, 0, 1)
    steps = np.where(reducing, 4, 2)
    cycles = ex_in + ex_later + sp * (mm + ex_red + add + steps * t.sync_cycles)
    c_blk = gb * rr * nb * OUT_BYTES
    done = (sp - 1) * np.where(reducing, c_blk, p_blk)    # earlier passes' outputs, live
    peak = b_blk + done + np.maximum(a_blk + p_blk, p_blk + red + c_blk * reducing)
    mem = home_bytes + peak + 1024 + 16 * gb * 5           # support + per-group alignment slack
    reason = np.full(len(mb), "", dtype=object)
    reason[mem > t.tile_bytes] = "memory"
    region1 = t.region1_bytes
    reason[(b_blk > region1) | (np.maximum(a_blk, p_blk) > t.max_alloc_bytes)] = "max_alloc"
    r1 = region1_live(t, sp, home_r1, a_blk, b_blk, p_blk, red, c_blk * reducing)
    reason[(reason == "") & (r1 > region1)] = "memory"
    # recv and rest split the estimate for the beam (plan/beam.py), which replaces the
    # balanced send term above by the producers' actual layouts
    return dict(gg=gg, gm=gm, gn=gn, gk=gk, gb=gb, mb=mb, kb=kb, nb=nb, cycles=cycles, mem=mem, r1=r1,
                sp=np.full(len(mb), sp, np.int64),
                recv=recv_in, rest=cycles - ex_in, recv_a=a_blk, b_blk=b_blk, reason=reason,
                rejected_grid=int((~fits).sum()))


def region1_live(t: Target, sp: int, home_r1: int, a_blk, b_blk, p_blk, red, c_blk) -> np.ndarray:
    """Bytes of a grid's fullest tile that only region 1 can hold (#26): b, an interleaved
    operand, and every buffer larger than region 0 (nothing straddles region0_end), live at
    once as in _grids' peak, plus such homes (`home_r1`). Plan knows neither code nor
    exchange tables, so "larger than region 0" means its whole size: a relaxation of
    expand's exact screen (expand/analysis.py region1_peak) that rejects only grids it
    would (tests/test_plan_region1.py). c_blk: 0 where gk = 1."""
    big = lambda x: np.where(x > t.region0_bytes, x, 0)
    done = (sp - 1) * big(np.where(c_blk > 0, c_blk, p_blk))
    return home_r1 + b_blk + done + np.maximum(big(a_blk) + big(p_blk), big(p_blk) + big(red) + big(c_blk))


def enumerate_grids(G: int, M: int, K: int, N: int, a_dtype: str, b_dtype: str, transpose_b: bool,
                    t: Target, home_bytes: int = 0, passes: tuple = (1,), panel: int = 0, home_r1: int = 0,
                    f32_partials: bool = False, normalise: bool = False):
    """Every grid (for each serial pass count of `passes`; ungrouped matmuls only) with
    estimated cycles, peak memory and rejection reason. With `panel` (the AMP reads b as
    micro-panels of that height) k blocks are whole panels (the last may end at K). `cycles` assumes the operand
    sends balanced over all tiles; `recv` (operand bytes a tile receives in the first
    exchange) and `rest` (cycles besides it) let the beam cost that exchange from the
    producers' layouts instead. `home_r1`: bytes of homes only region 1 can hold (the
    region-1 screen's, plan/homes.py home_bytes with over = region 0's size). `f32_partials`:
    k-splits keep their partials in f32 (partial_bytes), priced so. `normalise`: the op's output
    rows are divided by its a rows' sums (policy.deferred_norm), priced so."""
    parts = [_grids(G, M, K, N, a_dtype, b_dtype, transpose_b, t, home_bytes, sp, panel, home_r1, f32_partials,
                    normalise)
             for sp in passes if sp == 1 or (G == 1 and M >= 2 * sp)]
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "rejected_grid"}
    out["rejected_grid"] = sum(p["rejected_grid"] for p in parts)
    return out


def stationary_weights(graph) -> set[str]:
    """Parameters that can stay where their matmul reads them (weight-stationary):
    read once, as the b operand of an ungrouped matmul (and, inside a Repeat, a
    sequence member, read in place through a relocated operand address)."""
    reads = [n for op in graph.ops for n in op.inputs]
    seq = set(graph.repeat.sequences) if graph.repeat else None
    return {op.inputs[1] for op in graph.ops
            if op.kind == "matmul" and graph.tensors[op.inputs[1]].kind == "param"
            and (seq is None or op.inputs[1] in seq)
            and reads.count(op.inputs[1]) == 1 and len(op.attr("groups", ((0,) * 6,))) == 1}

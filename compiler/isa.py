"""The tile instruction set and exchange-table encoding: the contract between
`lower` (which writes these bytes) and `sim` (which executes only these bytes).

Program layout per tile (all little-endian uint32 words):
  * code: instructions of INSTR_WORDS words each, loaded at the tile's code
    address (region 0). Word 0 = opcode | dtype << 8; words 1.. are arguments.
    A tile program is a sequence of supersteps separated by SYNC, ended by END.
  * exchange table: send and receive entries (ENTRY_WORDS words each) that an
    EXCH instruction points at.
  * profile samples: one uint32 of cycles per superstep, written by the machine.
"""
from __future__ import annotations

import numpy as np

from .target import INTERLEAVED, STANDARD

INSTR_WORDS = 8
INSTR_BYTES = 4 * INSTR_WORDS
ENTRY_WORDS = 5
ENTRY_BYTES = 4 * ENTRY_WORDS
PROFILE_SAMPLE_BYTES = 4

# opcodes
END, SYNC, EXCH, MATMUL, ADD, COPY, GELU, LAYERNORM, SOFTMAX, CAST, ONLINE_SOFTMAX, ROWSCALE, REPEAT, BIAS, MERGE, HOST = range(16)
OP_NAMES = {END: "END", SYNC: "SYNC", EXCH: "EXCH", MATMUL: "MATMUL", ADD: "ADD", COPY: "COPY",
            GELU: "GELU", LAYERNORM: "LAYERNORM", SOFTMAX: "SOFTMAX", CAST: "CAST",
            ONLINE_SOFTMAX: "ONLINE_SOFTMAX", ROWSCALE: "ROWSCALE", REPEAT: "REPEAT", BIAS: "BIAS",
            MERGE: "MERGE", HOST: "HOST"}

# dtype codes (word 0, bits 8..15)
DTYPES = {"f16": 1, "fp8": 2, "f32": 3}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

# Word 0 = op (bits 0..7) | dtype << 8 | dtype2 << 16 | flags << 24. dtype2 = 0 means
# "same as dtype". MATMUL: dtype is b's, dtype2 a's; CAST: dtype is the destination,
# dtype2 the source. Other kernels take f16 (dtype 0 or f16) unless stated.
#
# Instruction arguments (words 1..7):
#   SYNC   -                                      end of this superstep
#   EXCH   table_addr, nsend, nrecv                take part in this superstep's exchange
#   MATMUL a, b, out, m, k, n, scale(f32 bits)     out[m,n] f16 = (a[m,k] @ b[k,n]) * scale,
#                                                  row-major; a of dtype2, b of dtype (f16 | fp8);
#                                                  products summed in f32, rounded once to f16.
#                                                  flags F_TRANSPOSE_B: b is [n, k], out = a @ b.T;
#                                                  F_PANEL_B: b [k, n] in AMP micro-panel order
#                                                  (panel_order, panel height = the target's
#                                                  amp_panel_elems[b's dtype]). A b dtype the target
#                                                  lists there is read ONLY that way (the AMP engine
#                                                  loads it as panels); other dtypes never are.
#   ADD    out, src0, src1, nsrc1, nelem, stride   out = src0 + sum_{i<nsrc1} (nelem f16 at
#                                                  src1 + i*stride), accumulated in f32;
#                                                  stride in BYTES. dtype2 f32: src0 and the
#                                                  partials are f32 (a k-split's, MATMUL
#                                                  F_F32_OUT), summed in f32 in that order
#                                                  (src0, then i = 0, 1, ..), rounded once to
#                                                  the f16 out
#   COPY   dst, src, row_bytes, rows, dst_stride, src_stride   local strided copy
#   GELU   out, src, nelem                         f16; flags bit 0: erf form (else tanh form)
#   LAYERNORM out, src, gamma, beta, rows, cols, eps(f32 bits)
#                                                  per row of src[rows, cols] f16: (x-mean)/sqrt(var+eps)
#                                                  * gamma + beta; gamma, beta f16[cols]; stats in f32
#          LAYERNORM flag F_LN_STATS: a row half's statistics only: out = f32 [rows, 2]
#                                                  (mean, sum of squared deviations) of src[rows, cols]
#                                                  (two-pass, f32); gamma, beta, eps unused
#          LAYERNORM flag F_LN_HALF: one half of each row of a 2 x cols-wide row: the gamma
#                                                  word is gamma's half f16[cols] with beta's at
#                                                  gamma + pad8(2 cols); the beta word is the
#                                                  statistics f32 [2, rows, 2] of the left then the
#                                                  right half (F_LN_STATS outputs): mean and
#                                                  variance of the whole row combined from the
#                                                  halves in that order (both tiles alike), then
#                                                  normalised as LAYERNORM (policy.ln_halves)
#   SOFTMAX out, src, rows, cols, scale(f32 bits), valid
#                                                  per row: softmax(src * scale) over the first `valid`
#                                                  columns (0 = all), the other columns written 0 (masked
#                                                  padding keys); f16 in/out, f32 inside
#          SOFTMAX flag F_SM_DEFER, word 7 = sums: the row left unnormalised, out = f16(exp(s - rowmax s))
#                                                  (in (0, 1]), and sums f32[rows] = the f32 sum of each row's
#                                                  f16 outputs: the 1/sum is applied after p·v on its few
#                                                  columns (ROWSCALE F_RECIP; policy.deferred_norm)
#   CAST   out, src, nelem, scale(f32 bits)        f16 -> fp8: out = e4m3(src / scale);
#                                                  fp8 -> f16: out = f16(src * scale)
#          MATMUL flag F_SEG_B: b given in segments. The b word is then the address of a
#          segment table in this tile's table blob (it must lie there, 4-byte aligned):
#          word 0 = nseg >= 1, then nseg entries (addr, len) of SEG_WORDS words. Segment
#          s is b's columns [c_s, c_s + len) (c_s = the earlier segments' lens summed;
#          all of them = n), stored at addr as a b operand of its own with n = len (the
#          same order: row-major, or micro-panel order with F_PANEL_B), under b's operand
#          rules (alignment, region, bank separation from a). Every segment but the last
#          spans whole AMP output-channel groups (target amp_out_group of the AMP type),
#          so the pieces cost what one block does: PopLibs' ConvPartial1x1Out reads its
#          weights through a vector of pointers, one per (conv group, in-channel group,
#          out-channel group) (compiler/costs/amp.py). With F_SEG_K too the segments are
#          ranges of b's rows instead (k: segment s holds rows [r_s, r_s + len) as a
#          [len, n] b operand of its own; every segment but the last whole in-channel
#          groups, and whole micro-panels with F_PANEL_B). Not with F_TRANSPOSE_B. A REPEAT
#          may relocate a segment's addr word (a Repeat sequence member read in place:
#          a ring piece, compiler/expand/ring.py).
#          MATMUL flag F_SEG_2D, with F_SEG_B (not F_SEG_K): the segments are rectangles
#          of b: entries (addr, r0, c0, rows, cols) of SEG2_WORDS words; segment s is
#          b[r0:r0+rows, c0:c0+cols] stored at addr as a [rows, cols] b operand of its
#          own (row-major, or micro-panel order with F_PANEL_B), under b's operand rules.
#          The rectangles tile b exactly (each element in one), every r0 a whole number
#          of in-channel groups (and micro-panels with F_PANEL_B), every c0 of
#          out-channel groups, and each rectangle ends on such an edge or at k (n): a
#          rectangle is whole (in-group, out-group) blocks, one weight pointer each in
#          PopLibs' vertex, so it costs what one block does. A REPEAT may relocate an
#          addr word (a ring piece cut as whole group x panel units, expand/ring2d.py).
#          MATMUL flag F_F32_OUT: out is f32[m, n], each product's sum times the scale
#          rounded once to f32 and stored (4 B an element, nothing rounded to f16): a
#          k-split's partial, which an ADD with dtype2 f32 reduces (policy.f32_partials).
#          MATMUL and CAST flag F_SCALE_TABLE: the scale word is instead the address of
#          an f32 in this tile's table blob (it must lie there); `lower` writes a Repeat
#          body's per-iteration scales there as one f32 per member and relocates the word
#          with stride 4, so iteration i reads member i's scale (one scale per tensor per
#          layer, where an immediate would be one for all layers).
#   ONLINE_SOFTMAX out, src, state, rows, cols, scale(f32 bits)
#                                                  one key block of flash attention. state = f32[3, rows]
#                                                  (running max m, running sum l, correction c).
#                                                  s = src*scale; m' = max(m, rowmax s); c = exp(m - m');
#                                                  out = f16(exp(s - m')); l = l*c + rowsum(out as f32);
#                                                  m = m'. flags bit 0 (first block): m = -inf, l = 0, c = 0.
#   ROWSCALE out, src0, vec, src1, rows, cols      out[r, c] = src0[r, c] * v[r] (+ src1[r, c]); f16 data,
#                                                  vec f32[rows]; flags bit 0: v = 1/vec, bit 1: add src1
#   BIAS   out, src, bias, rows, cols              out[r, c] = src[r, c] + bias[c]; f16, added in f32
#   MERGE  out, parts, stats, rows, cols, splits  split-key attention's merge of `splits` partial states:
#                                                  parts f16[splits, rows, cols] (unnormalised outputs O_j),
#                                                  stats f32[2, splits, rows] (running max m_j, then sum l_j);
#                                                  M = max_j m_j, c_j = exp(m_j - M) (f32),
#                                                  out = f16(sum_j c_j O_j * (1 / sum_j c_j l_j)), sums in
#                                                  f32 in split order, rounded once (compiler/sim/merge_kernel.py)
#   HOST   dir, first, rows, delta                 a host transfer (Poplar's stream copy inside a loop): the
#                                                  program's stepped host descriptors [first, first + rows)
#                                                  of step_in (dir 0, host -> tile) or step_out (dir 1),
#                                                  each row's host offset + delta (a REPEAT relocates delta:
#                                                  one stream item per iteration, images through a
#                                                  pipeline). Every row names the executing tile. A
#                                                  superstep of its own on that tile (no kernel, no EXCH).
#   REPEAT count, body, reloc, nreloc              run the next `body` instructions `count` times, then go on
#                                                  after them. Must start a superstep; the body ends with
#                                                  SYNC and every tile runs the same number of SYNCs per
#                                                  iteration. In iteration i every 32-bit word listed in the
#                                                  relocation table (nreloc RELOC_WORDS-word entries at
#                                                  `reloc`: absolute address of a code or exchange-table
#                                                  word, stride) is read as its stored value + i*stride:
#                                                  a Repeat sequence member's address. Memory is not changed.
#                                                  Loops nest: a REPEAT in a body (at the start of one of its
#                                                  supersteps) runs a loop whose body lies inside the
#                                                  enclosing one; a word listed by several running loops
#                                                  reads stored + the sum of their i*stride.
#
# Operand rules the machine enforces (kernel name -> operand -> (alignment, region class)).
# The expander requests allocations with exactly these constraints.
OPERANDS = {
    MATMUL: {"a": (8, STANDARD), "b": (16, INTERLEAVED), "out": (8, STANDARD)},
    ADD: {"out": (8, STANDARD), "src0": (8, STANDARD), "src1": (8, STANDARD)},
    COPY: {"dst": (4, STANDARD), "src": (4, STANDARD)},
    GELU: {"out": (8, STANDARD), "src": (8, STANDARD)},
    LAYERNORM: {"out": (8, STANDARD), "src": (8, STANDARD), "gamma": (8, STANDARD), "beta": (8, STANDARD)},
    SOFTMAX: {"out": (8, STANDARD), "src": (8, STANDARD), "sums": (4, STANDARD)},
    CAST: {"out": (8, STANDARD), "src": (8, STANDARD)},
    ONLINE_SOFTMAX: {"out": (8, STANDARD), "src": (8, STANDARD), "state": (8, STANDARD)},
    ROWSCALE: {"out": (8, STANDARD), "src0": (8, STANDARD), "vec": (8, STANDARD), "src1": (8, STANDARD)},
    BIAS: {"out": (8, STANDARD), "src": (8, STANDARD), "bias": (8, STANDARD)},
    MERGE: {"out": (8, STANDARD), "parts": (8, STANDARD), "stats": (8, STANDARD)},
}
RELOC_WORDS = 2         # relocation entry: word address, stride (bytes per iteration)
RELOC_BYTES = 4 * RELOC_WORDS
F_ERF = 1               # GELU flags
F_FIRST = 1             # ONLINE_SOFTMAX flags
F_RECIP, F_ADD = 1, 2   # ROWSCALE flags
F_LN_STATS, F_LN_HALF = 1, 2   # LAYERNORM flags (one or none)
F_SM_DEFER = 1          # SOFTMAX flags: unnormalised rows and their f32 sums (word 7)
F_TRANSPOSE_B = 1       # MATMUL flags: b stored [n, k] row-major, out = a @ b.T
F_PANEL_B = 2           # MATMUL flags: b stored in AMP micro-panel order (panel_order)
F_SEG_B = 4             # MATMUL flags: the b word is a segment table's address in the table blob
F_SEG_K = 8             # MATMUL flags, with F_SEG_B: the segments are ranges of b's rows (k), not columns
F_SEG_2D = 0x10         # MATMUL flags, with F_SEG_B: the segments are rectangles (addr, r0, c0, rows, cols)
F_F32_OUT = 0x40        # MATMUL flags: out is f32 (a k-split's partial), not f16
F_SCALE_TABLE = 0x80    # MATMUL and CAST flags: the scale word is an f32's address in the table blob
SCALE_BYTES = 4         # one f32 per Repeat member in a scale table
SEG_WORDS = 2           # segment table entry: addr, len (after one word: nseg)
SEG2_WORDS = 5          # F_SEG_2D segment table entry: addr, r0, c0, rows, cols
# Operand pairs read in the same cycle: they must sit in distinct memory elements.
BANK_SEPARATED = {MATMUL: [("a", "b")]}
COPY_WORD = 4  # a local copy moves whole aligned 32-bit words (else: unencodable)

# Exchange entries:
#   send: dst_tile, src_addr, row_bytes, rows, src_stride
#   recv: src_tile, dst_addr, row_bytes, rows, dst_stride
# Sends from tile s to tile d and receives on d from s are matched in table order;
# each matched pair must carry the same number of bytes (row shapes may differ).
#
# Multicast send (policy.broadcast_sends): a send entry whose dst_tile word has bit 31
# (MCAST) set; its low 31 bits are the byte offset, from the EXCH's table_addr, of a
# receiver list in the tile's table blob: word 0 = k >= 2, then k distinct tile ids
# (mcast_list_bytes). The entry is one send to each listed tile, in list order: each
# must post a receive from this tile of the same bytes, matched like any send's; the
# sender is charged its bytes once (the IPU's time-scheduled exchange: every tile
# listening to a sender's bus in that cycle receives its data; Poplar copies one source
# to many tiles so; docs/architecture.md §2 "a broadcast costs its sender each byte
# once"). `lower` writes a tile's lists after all its exchange entries.
MCAST = 1 << 31


def instr(op: int, *args: int, dtype: str | None = None, dtype2: str | None = None,
          flags: int = 0) -> np.ndarray:
    w = np.zeros(INSTR_WORDS, np.uint32)
    w[0] = op | (DTYPES[dtype] << 8 if dtype else 0) | (DTYPES[dtype2] << 16 if dtype2 else 0) | flags << 24
    w[1:1 + len(args)] = np.asarray(args, dtype=np.int64).astype(np.uint32)
    return w


def f32_bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def bits_f32(w) -> np.ndarray:
    return np.asarray(w, np.uint32).view(np.float32)


def code_bytes(n_instr) -> np.ndarray:
    return np.asarray(n_instr) * INSTR_BYTES


def table_bytes(n_entries) -> np.ndarray:
    return np.asarray(n_entries) * ENTRY_BYTES


def mcast_list_bytes(k) -> np.ndarray:
    """Bytes of multicast receiver lists of k receivers each."""
    return 4 * (1 + np.asarray(k))


def seg_table_bytes(nseg, words=SEG_WORDS) -> np.ndarray:
    """Bytes of F_SEG_B segment tables of nseg segments each, of `words` words a segment
    (SEG_WORDS; SEG2_WORDS with F_SEG_2D)."""
    return 4 * (1 + np.asarray(words) * np.asarray(nseg))


def panel_order(x: np.ndarray, P: int) -> np.ndarray:
    """AMP micro-panel order of matrices x[..., R, C] along R (the packing axis: k of a
    b operand): panel p holds rows [p·P, min(R, p·P + P)) transposed, [C, h] row-major
    (h = P, or R mod P for the last), panels one after another. So every column of a
    panel is h contiguous elements, and a panel's columns [c0, c1) are one contiguous
    span. Returns x[..., R·C] in that order."""
    x = np.asarray(x)
    *lead, R, C = x.shape
    full = R - R % P
    parts = [x[..., :full, :].reshape(*lead, full // P, P, C).swapaxes(-1, -2).reshape(*lead, -1)]
    if R % P:
        parts.append(x[..., full:, :].swapaxes(-1, -2).reshape(*lead, -1))
    return np.concatenate(parts, -1)


def from_panel_order(flat: np.ndarray, R: int, C: int, P: int) -> np.ndarray:
    """The inverse of panel_order: flat[..., R·C] -> x[..., R, C]."""
    flat = np.asarray(flat)
    lead = flat.shape[:-1]
    full = R - R % P
    x = flat[..., :full * C].reshape(*lead, full // P, C, P).swapaxes(-1, -2).reshape(*lead, full, C)
    if R % P:
        x = np.concatenate([x, flat[..., full * C:].reshape(*lead, C, R % P).swapaxes(-1, -2)], -2)
    return x

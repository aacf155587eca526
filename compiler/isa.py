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
END, SYNC, EXCH, MATMUL, ADD, COPY = range(6)
OP_NAMES = {END: "END", SYNC: "SYNC", EXCH: "EXCH", MATMUL: "MATMUL", ADD: "ADD", COPY: "COPY"}

# dtype codes (word 0, bits 8..15)
DTYPES = {"f16": 1, "fp8": 2, "f32": 3}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

# Instruction arguments (words 1..7):
#   SYNC   -                                      end of this superstep
#   EXCH   table_addr, nsend, nrecv                take part in this superstep's exchange
#   MATMUL a, b, out, m, k, n, scale(f32 bits)     out[m,n] f16 = (a[m,k] @ b[k,n]) * scale,
#                                                  a,b of the dtype, row-major, FP16 partials
#   ADD    out, src0, src1, nsrc1, nelem, stride   out = src0 + sum_{i<nsrc1} (nelem f16 at
#                                                  src1 + i*stride), accumulated in f32;
#                                                  stride in BYTES
#   COPY   dst, src, row_bytes, rows, dst_stride, src_stride   local strided copy
#
# Operand rules the machine enforces (kernel name -> operand -> (alignment, region class)).
# The expander requests allocations with exactly these constraints.
OPERANDS = {
    MATMUL: {"a": (8, STANDARD), "b": (16, INTERLEAVED), "out": (8, STANDARD)},
    ADD: {"out": (8, STANDARD), "src0": (8, STANDARD), "src1": (8, STANDARD)},
    COPY: {"dst": (4, STANDARD), "src": (4, STANDARD)},
}
# Operand pairs read in the same cycle: they must sit in distinct memory elements.
BANK_SEPARATED = {MATMUL: [("a", "b")]}
COPY_WORD = 4  # a local copy moves whole aligned 32-bit words (else: unencodable)

# Exchange entries:
#   send: dst_tile, src_addr, row_bytes, rows, src_stride
#   recv: src_tile, dst_addr, row_bytes, rows, dst_stride
# Sends from tile s to tile d and receives on d from s are matched in table order;
# each matched pair must carry the same number of bytes (row shapes may differ).


def instr(op: int, *args: int, dtype: str | None = None) -> np.ndarray:
    w = np.zeros(INSTR_WORDS, np.uint32)
    w[0] = op | (DTYPES[dtype] << 8 if dtype else 0)
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

"""Instruction word 0: op | dtype << 8 | dtype2 << 16 | flags << 24 (isa.py).

Each opcode accepts a fixed set of dtype codes, dtype2 codes and flag bits; the
machine refuses anything else (an unknown opcode, dtype or flag bit is an
invalid instruction, never silently ignored). Checks are table lookups on whole
rounds of fetched instructions (one numpy index per field).
"""
from __future__ import annotations

import numpy as np

from .. import isa
from .fault import first_fault

F16, FP8, F32 = (isa.DTYPES[d] for d in ("f16", "fp8", "f32"))
NOPS = max(isa.OP_NAMES) + 1

# opcode -> (allowed dtype codes, allowed dtype2 codes, allowed flag bits)
_F16_ONLY = ({0, F16}, {0}, 0)
RULES = {
    isa.END: ({0}, {0}, 0),
    isa.SYNC: ({0}, {0}, 0),
    isa.EXCH: ({0}, {0}, 0),
    isa.COPY: ({0}, {0}, 0),
    isa.REPEAT: ({0}, {0}, 0),
    isa.HOST: ({0}, {0}, 0),
    isa.ADD: ({0, F16}, {0, F32}, 0),          # dtype2 f32: f32 sources (a k-split's partials)
    isa.MATMUL: ({F16, FP8, F32}, {0, F16, FP8, F32},
                 isa.F_TRANSPOSE_B | isa.F_PANEL_B | isa.F_SEG_B | isa.F_SEG_K | isa.F_SEG_2D
                 | isa.F_SCALE_TABLE | isa.F_F32_OUT),
    isa.GELU: ({0, F16}, {0}, isa.F_ERF),
    isa.LAYERNORM: ({0, F16}, {0}, isa.F_LN_STATS | isa.F_LN_HALF),   # policy.ln_halves' two kernels
    isa.SOFTMAX: ({0, F16}, {0}, isa.F_SM_DEFER),              # policy.deferred_norm
    isa.CAST: ({F16, FP8}, {F16, FP8}, isa.F_SCALE_TABLE),
    isa.ONLINE_SOFTMAX: ({0, F16}, {0}, isa.F_FIRST),
    isa.ROWSCALE: ({0, F16}, {0}, isa.F_RECIP | isa.F_ADD),
    isa.BIAS: _F16_ONLY,
    isa.MERGE: _F16_ONLY,
}
assert set(RULES) == set(isa.OP_NAMES)

DT_OK = np.zeros((NOPS, 256), bool)
DT2_OK = np.zeros((NOPS, 256), bool)
FLAG_MASK = np.zeros(NOPS, np.int64)
for _op, (_d, _d2, _f) in RULES.items():
    DT_OK[_op, sorted(_d)] = True
    DT2_OK[_op, sorted(_d2)] = True
    FLAG_MASK[_op] = _f


def _hex(x) -> str:
    return hex(int(x))


def fields(w0):
    """word 0 (int64 array) -> op, dtype, dtype2, flags."""
    return w0 & 0xFF, (w0 >> 8) & 0xFF, (w0 >> 16) & 0xFF, (w0 >> 24) & 0xFF


def dtype_name(code) -> str:
    return isa.DTYPE_NAMES.get(int(code), f"code {int(code)}")


def check(w0, tiles, step, pcs):
    """Validate word 0 of a round of fetched instructions; returns op, dt, dt2, flags."""
    op, dt, dt2, fl = fields(w0)
    first_fault(op >= NOPS, lambda i: f"invalid instruction word 0 = {_hex(w0[i])} (opcode {op[i]})",
                tiles, step, pcs)
    name = lambda i: isa.OP_NAMES[int(op[i])]
    first_fault(~DT_OK[op, dt], lambda i: f"invalid instruction word 0 = {_hex(w0[i])}: {name(i)} "
                                          f"has invalid dtype code {dt[i]}", tiles, step, pcs)
    first_fault(~DT2_OK[op, dt2], lambda i: f"invalid instruction word 0 = {_hex(w0[i])}: {name(i)} "
                                            f"has invalid dtype2 code {dt2[i]}", tiles, step, pcs)
    first_fault((fl & ~FLAG_MASK[op]) != 0,
                lambda i: f"invalid instruction word 0 = {_hex(w0[i])}: {name(i)} has unknown flag bits "
                          f"{_hex(fl[i] & ~FLAG_MASK[op[i]])}", tiles, step, pcs)
    return op, dt, dt2, fl

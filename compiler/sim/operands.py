"""What every kernel does with its operands around its arithmetic: instances whose shape
words match form a group (`groups`: one numpy call each); operand bytes are widened to float32
by tables built with the library casts (`widen`, `_WIDEN`: value-independent and bit-identical);
float32 results are rounded to f16 bit-identically to numpy's cast (`to_f16`); a MATMUL slice
works in a per-thread scratch buffer (`scratch`). Separate from kernels.py (the machinery that
checks and runs a kernel call) and from matmul_kernels.py / vector_kernels.py (the opcodes),
which all use it, so that none of those imports another's file to reach these helpers."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np

NP_DTYPES = {"f16": np.dtype("<f2"), "fp8": np.dtype(ml_dtypes.float8_e4m3fn), "f32": np.dtype("<f4")}


_SCRATCH = threading.local()


def scratch(nbytes: int) -> np.ndarray:
    """This thread's scratch bytes (uint8[>= nbytes], 64-byte aligned), kept between calls:
    a MATMUL slice's widened operands and result, without fresh pages every round."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < nbytes:
        raw = np.empty(nbytes + 64, np.uint8)
        off = (-raw.ctypes.data) % 64
        buf = _SCRATCH.buf = raw[off:off + nbytes]
    return buf


# Widening by table lookup: numpy's f16 -> f32 slows ~3x on subnormal inputs and
# ml_dtypes' fp8 cast is slower still; a lookup is value-independent, and the
# tables are built with the library casts, so results are bit-identical.
_WIDEN = {"f16": np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view("<f2").astype(np.float32),
          "fp8": np.arange(256, dtype=np.uint8).view(NP_DTYPES["fp8"]).astype(np.float32)}
# fp8 bytes two at a time: entry u (a little-endian uint16) holds the float32 pair of its
# low and high byte, stored as one 8-byte item (one index per two elements: ~1.6x faster)
_FP8_PAIRS = np.stack([np.tile(_WIDEN["fp8"], 256), np.repeat(_WIDEN["fp8"], 256)], 1).copy().view("<f8").reshape(-1)


def widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Operand bytes (uint8[..., nbytes]) of `dtype` -> float32[..., nelem]."""
    if dtype == "f16":
        return _WIDEN["f16"][raw.view("<u2")]
    if dtype == "fp8":
        if raw.shape[-1] % 2 == 0 and raw.flags.c_contiguous:
            return _FP8_PAIRS[raw.view("<u2")].view(np.float32)
        return _WIDEN["fp8"][raw]
    return raw.view("<f4").copy()


def to_f16(x: np.ndarray) -> np.ndarray:
    """float32 -> float16, round-to-nearest-even, bit-identical to astype.

    numpy's conversion takes a ~20x slower software path for results below the
    f16 normal range, which deep programs reach as activations shrink.
    Those results are multiples of 2**-24: rint(|x| * 2**24) (exact scaling, one
    half-even rounding) *is* the f16 bit pattern (1024 -> the smallest normal)."""
    # numpy's slow path costs per subnormal result: when a strided sample finds
    # them rare, plain astype is cheapest (either way the bits are the same)
    tiny = np.float32(2.0 ** -14)
    flat = x.reshape(-1)
    if flat.size >= 4096 and np.count_nonzero(np.abs(flat[::61]) < tiny) * 61 * 64 < flat.size:
        return x.astype("<f2")
    small = np.abs(x) < tiny
    if not small.any():
        return x.astype("<f2")
    out = np.where(small, np.float32(0), x).astype("<f2")
    xs = x[small]
    bits = np.rint(np.abs(xs) * np.float32(2.0 ** 24)).astype(np.uint16)
    out.view(np.uint16)[small] = bits | (np.signbit(xs).astype(np.uint16) << 15)
    return out


_NO_SCALE = np.zeros(0, np.float32)


def groups(keys: np.ndarray):
    """Index arrays of the rows of keys[n, k] that are equal (each in tile order)."""
    if len(keys) == 0:
        return []
    if (keys == keys[0]).all():              # the common case: one shape on every tile
        return [np.arange(len(keys))]
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    cuts = np.flatnonzero(np.diff(inv[order])) + 1
    return np.split(order, cuts)

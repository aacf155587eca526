"""An op output's bytes as the host read them back, made into values on demand
(compiler/readback.py's checks: the whole tensor, some rows, or some columns)."""
from __future__ import annotations

import threading

import numpy as np

from .models.gemm import FP8
from .sim import jit

# e4m3 byte -> float32 by one table lookup: ml_dtypes' cast of an fp8 array was the largest
# part of check=rows' column stripes with FP8 activations (they read a matmul's `a` whole)
_E4M3 = np.arange(256, dtype=np.uint8).view(FP8).astype(np.float32)


class Snapshot:
    """An op output's bytes as read back (per block shape: the blocks' raw bytes, their
    rows and columns, and where each starts in the tensor); array() makes the values
    (float32: f16 and e4m3 values are exact in it, NaN where no block lies), once. The
    simulator's thread only copies bytes; the checks' worker makes and places the values."""

    def __init__(self, shape, dtype, blocks):
        self.shape, self.dtype, self.blocks, self._arr = shape, dtype, blocks, None
        self._lock = threading.Lock()     # the worker, or the simulator's thread when the worker lags

    def _typed(self, raw, r, c):
        """A block group's bytes as [blocks, r, c] elements: e4m3 left as bytes (f32 below)."""
        return (raw if np.dtype(self.dtype) == np.dtype(FP8) else raw.view(self.dtype)).reshape(len(raw), r, c)

    def _f32(self, x):
        return _E4M3[x] if np.dtype(self.dtype) == np.dtype(FP8) else x.astype(np.float32)

    def array(self) -> np.ndarray:
        with self._lock:
            if self._arr is None:
                out = np.full(self.shape, np.nan, np.float32)
                for raw, r, c, r0, c0 in self.blocks:
                    vals = self._f32(self._typed(raw, r, c))
                    jit.place_blocks(out, vals, r0, c0)
                self._arr, self.blocks = out, None
            return self._arr     # stored values: times the tensor's scale when used

    def rows(self, R: np.ndarray) -> np.ndarray:
        """Rows R (sorted, unique) of array(), made from the blocks holding them only (a
        row-sampled check reads a few rows of each output; placing every block cost more
        than the checks themselves)."""
        with self._lock:
            if self._arr is not None:
                return self._arr[R]
            blocks = self.blocks
        at = np.full(self.shape[0], -1, np.int64)
        at[R] = np.arange(len(R))
        out = np.full((len(R), self.shape[1]), np.nan, np.float32)
        for raw, r, c, r0, c0 in blocks:
            rr = r0[:, None] + np.arange(r)                       # [blocks, r]: each block row's tensor row
            b, i = np.nonzero(at[rr] >= 0)
            if len(b):
                vals = self._f32(self._typed(raw, r, c)[b, i])
                out[at[rr[b, i]][:, None], c0[b][:, None] + np.arange(c)] = vals
        return out

    def cols(self, C: np.ndarray) -> np.ndarray:
        """Columns C (sorted, unique) of array(), every row, made from the blocks holding
        them only (check=rows' column stripes of a matmul: every row of a few columns)."""
        with self._lock:
            if self._arr is not None:
                return self._arr[:, C]
            blocks = self.blocks
        at = np.full(self.shape[1], -1, np.int64)
        at[C] = np.arange(len(C))
        out = np.full((self.shape[0], len(C)), np.nan, np.float32)
        for raw, r, c, r0, c0 in blocks:
            cc = c0[:, None] + np.arange(c)                       # [blocks, c]: each block column's tensor column
            b, j = np.nonzero(at[cc] >= 0)
            if len(b):
                vals = self._f32(self._typed(raw, r, c)[b, :, j])   # [hits, r]
                out[r0[b][:, None] + np.arange(r), at[cc[b, j]][:, None]] = vals
        return out

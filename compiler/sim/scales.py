"""The scale word of MATMUL and CAST (isa.py): f32 bits, or with F_SCALE_TABLE the
address of an f32 in the tile's own table blob (a Repeat body's per-iteration scale:
the word is relocated by 4 bytes per iteration). The machine reads the f32 there and
refuses an address outside the blob or not 4-byte aligned."""
from __future__ import annotations

import numpy as np

from .. import isa
from .fault import first_fault


def scale_word(k, step, tiles, pcs, word, fl, op) -> np.ndarray:
    """float32[n] scales of a round of `op` instructions (scale words `word`, flags
    `fl`) on `tiles`; k is the Kernels (its memory `m`, and `tables`, the machine's
    per-tile (table_addr, table_len))."""
    scale = word.astype(np.uint32).view(np.float32)
    tab = (fl & isa.F_SCALE_TABLE) != 0
    if not tab.any():
        return scale
    t0, tl = getattr(k, "tables", None) or (np.zeros(k.t.tiles, np.int64), np.zeros(k.t.tiles, np.int64))
    lo, hi = t0[tiles], t0[tiles] + tl[tiles]
    first_fault(tab & ((word < lo) | (word + isa.SCALE_BYTES > hi) | (word % 4 != 0)),
                lambda i: f"{isa.OP_NAMES[op]} scale at {hex(int(word[i]))} (F_SCALE_TABLE) is not an aligned "
                          f"f32 of the tile's table blob [{hex(int(lo[i]))}, {hex(int(hi[i]))})",
                tiles, step, pcs)
    scale = scale.copy()
    scale[tab] = k.m.read_words(tiles[tab], word[tab], 1)[:, 0].astype(np.uint32).view(np.float32)
    return scale

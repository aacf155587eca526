"""Inter-chip transfers as instructions (DESIGN.md §7a): at a stage boundary chip k SENDs
its carried activation (its output `y`) over the IPU-Links and chip k+1 RECVs it into its
input buffer (`x`). A LINK program is uint32 words, what the machine (compiler/sim/link.py)
executes and the oracle (compiler/sim/link_oracle.py) re-derives the cost of:

    word 0..6   MAGIC, src chip, dst chip, links, bytes on the wire, nsend, nrecv
    then nsend SEND rows, then nrecv RECV rows, ROW_WORDS words each:
                tile, addr, row_bytes, rows, tile_stride, wire_off, wire_stride

A SEND row reads `rows` rows of `row_bytes` from `tile` at `addr` (rows tile_stride apart)
to the wire at wire_off (rows wire_stride apart); a RECV row writes the wire's bytes
there on the receiving chip. The rows are the chips' own stream descriptors of the two
tensors (lower's host_out rows of y on chip k, host_in rows of x on chip k+1): the
tensor leaves and enters each chip exactly where the lowered program placed it."""
from __future__ import annotations

import numpy as np

MAGIC = 0x4B4E494C          # "LINK"
HEAD_WORDS = 7
ROW_WORDS = 7
ROW_FIELDS = ("tile", "addr", "row_bytes", "rows", "tile_stride", "host_off", "host_stride")


def _rows(table: dict, stream: int) -> np.ndarray:
    k = np.asarray(table["stream"]) == stream
    return np.stack([np.asarray(table[f])[k] for f in ROW_FIELDS], 1).astype(np.int64).reshape(-1, ROW_WORDS)


def encode(src_prog, dst_prog, y: str, x: str, src: int, links: int) -> np.ndarray:
    """The LINK words of the boundary between chip `src` (its program src_prog, sending
    output stream y) and chip src + 1 (dst_prog, receiving input stream x)."""
    if y not in src_prog.out_streams:
        raise ValueError(f"link {src}->{src + 1}: chip {src}'s program has no output stream {y!r}")
    if x not in dst_prog.in_streams:
        raise ValueError(f"link {src}->{src + 1}: chip {src + 1}'s program has no input stream {x!r}")
    send = _rows(src_prog.host_out, list(src_prog.out_streams).index(y))
    recv = _rows(dst_prog.host_in, dst_prog.in_streams.index(x))
    nbytes = int(src_prog.out_streams[y])
    head = np.array([MAGIC, src, src + 1, links, nbytes, len(send), len(recv)], np.int64)
    words = np.concatenate([head, send.ravel(), recv.ravel()])
    if words.min(initial=0) < 0 or words.max(initial=0) >= 2 ** 32:
        raise ValueError(f"link {src}->{src + 1}: a field does not fit a 32-bit word")
    return words.astype(np.uint32)

"""The IPU-Link between two chips (DESIGN.md §7a): executes a LINK program's SEND and RECV
(compiler/pod/link.py words) and costs it.

    send(words, tensor_bytes) -> wire        the SEND rows' bytes, in wire order
    recv(words, wire) -> None                refuses a wire of the wrong length (a dropped
                                            or extra byte): MachineFault naming the link
    cycles(words, target, links_bytes_per_s, latency) -> int

The chip's machine gathers the SEND rows from its tiles as its out-stream phase does
(the same descriptors, compiler/sim/load.py host_out) and scatters the RECV rows as its
in-stream phase does; here the bytes travel between the two chips instead of to the host.

Cost (the link model): a transfer lasts the link latency plus the longest of
  * the bytes over the boundary's links:  ceil(bytes · clock / (links · link_bytes_per_s)),
  * the busiest sending tile at the exchange's per-tile rate: ceil(max sent / exchange_bytes_per_cycle),
  * the busiest receiving tile alike,
since every byte leaves a tile through its exchange port and the links then carry the sum
(Graphcore: IPU-Links extend the exchange fabric to other chips). Figures: conf/target/pod*.yaml."""
from __future__ import annotations

import math

import numpy as np

from .fault import MachineFault

_MAGIC, _HEAD, _ROW = 0x4B4E494C, 7, 7


def decode(words: np.ndarray) -> dict:
    w = np.asarray(words, np.int64)
    if len(w) < _HEAD or w[0] != _MAGIC:
        raise MachineFault("not a LINK program (bad magic word)", phase="link")
    src, dst, links, nbytes, ns, nr = (int(v) for v in w[1:_HEAD])
    if len(w) != _HEAD + _ROW * (ns + nr):
        raise MachineFault(f"link {src}->{dst}: {len(w)} words, expected {_HEAD + _ROW * (ns + nr)}", phase="link")
    rows = w[_HEAD:].reshape(-1, _ROW)
    return dict(src=src, dst=dst, links=links, bytes=nbytes, send=rows[:ns], recv=rows[ns:])


def _extent(rows: np.ndarray) -> int:
    """Wire bytes a set of rows covers (each row block ends at wire_off + (n-1)·stride + row_bytes)."""
    if not len(rows):
        return 0
    rb, n, off, st = rows[:, 2], rows[:, 3], rows[:, 5], rows[:, 6]
    return int((off + (n - 1) * st + rb).max())


def send(words, tensor: np.ndarray) -> np.ndarray:
    """The wire: the bytes the SEND rows read. `tensor` is the sending chip's out-stream
    gather of them (the machine's host_out, the same descriptors)."""
    d = decode(words)
    t = np.asarray(tensor, np.uint8).ravel()
    if len(t) != d["bytes"] or _extent(d["send"]) > d["bytes"]:
        raise MachineFault(f"link {d['src']}->{d['dst']}: chip {d['src']} sends {len(t)} B, the LINK "
                           f"program moves {d['bytes']} B", phase="link")
    return t.copy()


def recv(words, wire: np.ndarray) -> None:
    d = decode(words)
    if len(wire) != d["bytes"]:
        raise MachineFault(f"link {d['src']}->{d['dst']}: chip {d['dst']} expects {d['bytes']} B, the link "
                           f"delivered {len(wire)} B", phase="link")
    if _extent(d["recv"]) > d["bytes"]:
        raise MachineFault(f"link {d['src']}->{d['dst']}: a RECV row reads past the {d['bytes']} B on the wire",
                           phase="link")


def cycles(words, target, link_bytes_per_s: int, latency: int) -> int:
    d = decode(words)
    per_tile = lambda r: np.bincount(r[:, 0], weights=r[:, 2] * r[:, 3]) if len(r) else np.zeros(1)
    busiest = max(per_tile(d["send"]).max(), per_tile(d["recv"]).max())
    wire = -(-d["bytes"] * int(target.clock_hz) // (d["links"] * link_bytes_per_s))      # integer ceil
    return int(latency + max(wire, math.ceil(int(busiest) / target.exchange_bytes_per_cycle)))

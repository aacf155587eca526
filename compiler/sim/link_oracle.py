"""An independent oracle for the IPU-Link's cycles, written from the link model's
statement alone (docs/architecture.md §2, conf/target/pod*.yaml): it reads the LINK words
with its own offsets and the raw target mapping (no Target, no compiler/sim/link.py), and
sums the bytes per tile row by row in plain Python integers.

    link_cycles(words, target: dict) -> int

latency + max(ceil(bytes on the wire / (links x bytes per link per cycle)),
              ceil(busiest sending or receiving tile's bytes / per-tile exchange rate))."""
from __future__ import annotations


def link_cycles(words, target: dict) -> int:
    w = [int(v) for v in words]
    links, nbytes, nsend, nrecv = w[3], w[4], w[5], w[6]
    rows = [w[7 + 7 * i:14 + 7 * i] for i in range(nsend + nrecv)]
    busiest = 0
    for part in (rows[:nsend], rows[nsend:]):
        per = {}
        for tile, _addr, row_bytes, n, *_ in part:
            per[tile] = per.get(tile, 0) + row_bytes * n
        busiest = max([busiest, *per.values()])
    pod, clock = target["pod"], int(target["clock_hz"])
    rate = links * pod["link_bytes_per_s"]
    wire = -(-nbytes * clock // rate)
    port = -(-busiest // target["exchange_bytes_per_cycle"])
    return pod["link_latency_cycles"] + max(wire, port)

"""Independent brute-force validator of a placement.

Deliberately shares no code with the allocator (instance.py, greedy.py,
search.py, ...): it recomputes extents, regions and bank units from the raw
memory-map fields and checks every pair, O(n^2), with plain integer
arithmetic. If the allocator and this file ever disagree, one of them is wrong,
which is the point (the simulator treats an overlap as a wrong answer).

Checked: every request placed; alignment (of every sequence member); containment
in [memory_base, memory_end); not straddling region0_end; region class (code in
region 0, interleaved in region 1); max_alloc; reserved ranges; byte overlap of
lifetime-overlapping requests; bank separation of edges whose lifetimes overlap
(unit = 16 KiB element in region 0, element pair in region 1); a bank-separated
sequence (count > 1 with an edge) owning its units against every live request.
"""
from __future__ import annotations

_STANDARD, _INTERLEAVED, _CODE = 0, 1, 2


def validate(problem, addr) -> list[str]:
    p = problem
    n = len(p.size)
    nm = lambda i: p.names[i] if p.names else f"#{i}"
    errs: list[str] = []
    addr = [int(a) for a in addr]
    if len(addr) != n:
        return [f"placement has {len(addr)} addresses for {n} requests"]
    base, r0, top, E = int(p.memory_base), int(p.region0_end), int(p.memory_end), int(p.element_bytes)
    size = [int(x) for x in p.size]
    align = [int(x) for x in p.align]
    start = [int(x) for x in p.start]
    end = [int(x) for x in p.end]
    region = [int(x) for x in p.region]
    count = [int(x) for x in p.count]
    stride = [int(x) for x in p.stride]
    span = [stride[i] * (count[i] - 1) + size[i] for i in range(n)]
    max_alloc = int(p.max_alloc) if p.max_alloc is not None else max(r0 - base, top - r0)
    r0_units = -(-(r0 - base) // E)

    def unit(x):
        if x < r0:
            return (x - base) // E
        return r0_units + (x - r0) // (2 * E)

    placed = [False] * n
    for i in range(n):
        a, x = addr[i], span[i]
        if a < 0:
            errs.append(f"{nm(i)}: not placed")
            continue
        placed[i] = True
        if size[i] <= 0:
            errs.append(f"{nm(i)}: size {size[i]} is not positive")
        for k in range(count[i]):
            if (a + k * stride[i]) % align[i]:
                errs.append(f"{nm(i)}: member {k} at {a + k * stride[i]:#x} not aligned to {align[i]}")
                break
        if a < base or a + x > top:
            errs.append(f"{nm(i)}: [{a:#x}, {a + x:#x}) outside memory [{base:#x}, {top:#x})")
        if a < r0 < a + x:
            errs.append(f"{nm(i)}: [{a:#x}, {a + x:#x}) straddles the region boundary {r0:#x}")
        if region[i] == _CODE and a + x > r0:
            errs.append(f"{nm(i)}: code request at {a:#x} outside region 0")
        if region[i] == _INTERLEAVED and a < r0:
            errs.append(f"{nm(i)}: interleaved request at {a:#x} outside region 1")
        if x > max_alloc:
            errs.append(f"{nm(i)}: extent {x} exceeds max_alloc {max_alloc}")
        for lo, hi in p.reserved.tolist():
            if a < hi and lo < a + x:
                errs.append(f"{nm(i)}: [{a:#x}, {a + x:#x}) overlaps reserved [{lo:#x}, {hi:#x})")

    live_together = lambda i, j: start[i] < end[j] and start[j] < end[i]
    for i in range(n):
        if not placed[i]:
            continue
        for j in range(i + 1, n):
            if placed[j] and live_together(i, j):
                if addr[i] < addr[j] + span[j] and addr[j] < addr[i] + span[i]:
                    errs.append(f"{nm(i)} [{addr[i]:#x}, {addr[i] + span[i]:#x}) overlaps "
                                f"{nm(j)} [{addr[j]:#x}, {addr[j] + span[j]:#x}) while both are live")

    def units(i):
        return set(range(unit(addr[i]), unit(addr[i] + span[i] - 1) + 1))

    pairs = set()
    for a_, b_ in p.bank_edges.tolist():
        pairs.add((min(a_, b_), max(a_, b_)))
    with_edge = {i for e in p.bank_edges.tolist() for i in e}
    for i in with_edge:
        if count[i] > 1:  # a bank-separated sequence owns its units against all live requests
            for j in range(n):
                if j != i:
                    pairs.add((min(i, j), max(i, j)))
    for i, j in sorted(pairs):
        if placed[i] and placed[j] and live_together(i, j):
            shared = units(i) & units(j)
            if shared:
                errs.append(f"{nm(i)} and {nm(j)} share memory unit(s) {sorted(shared)} "
                            f"while both are live (bank separation)")
    return errs

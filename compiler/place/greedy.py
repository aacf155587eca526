"""Greedy placement: one pass over an order, each request at the lowest legal
address given the requests already placed (lowest address also means region 0
first). Offline orders see the whole lifetime of what is already placed
("lifetime subtraction"): a request is blocked only by placed requests whose
lifetimes overlap its own.

Orders (each a PlaceConfig flag):
  online     allocation-event order: by start, then index (what a runtime malloc sees)
  lifetime   longest lifetime first, then larger extent
  alignment  largest alignment first, then larger extent
  end_first  requests surviving to completion first, by descending size; then the rest
             by descending size (the previous stack's fix for near-capacity tiles)
"""
from __future__ import annotations

from .instance import Instance


def orders(inst: Instance, cfg) -> list[tuple[str, list[int]]]:
    n, ext, s, e, al = inst.n, inst.ext, inst.start, inst.end, inst.align
    out = []
    idx = range(n)
    if cfg.greedy_online:
        out.append(("greedy-online", sorted(idx, key=lambda i: (s[i], i))))
    if cfg.order_lifetime:
        out.append(("greedy-lifetime", sorted(idx, key=lambda i: (s[i] - e[i], -ext[i], s[i], i))))
    if cfg.order_alignment:
        out.append(("greedy-alignment", sorted(idx, key=lambda i: (-al[i], -ext[i], s[i], i))))
    if cfg.order_end_first:
        T = inst.t_end
        out.append(("greedy-end-first",
                    sorted(idx, key=lambda i: (e[i] != T, -ext[i], s[i], i))))
    return out


def first_fit(dom: list[int], al: int, e: int, blocks: list[tuple[int, int]]) -> int:
    """Lowest start in the domain `dom` whose [a, a+e) misses every blocked byte
    range; `blocks` sorted by lo. -1 if none. One pass: a only grows, so a block
    that ended at or below a is never needed again."""
    nd = len(dom)
    if not nd:
        return -1
    t, k, nb = 0, 0, len(blocks)
    a = dom[0]
    while True:
        while a >= dom[t + 1]:
            t += 2
            if t >= nd:
                return -1
        if a < dom[t]:
            a = dom[t]
        moved = False
        while k < nb:
            lo, hi = blocks[k]
            if lo >= a + e:
                break
            k += 1
            if hi > a:
                a = -(-hi // al) * al
                moved = True
                break
        if not moved:
            return a


def place_order(inst: Instance, order: list[int], addr: list[int] | None = None):
    """Place `order` greedily on top of the partial placement `addr` (-1 = free).
    Returns (addr, failed_request or -1)."""
    n = inst.n
    addr = [-1] * n if addr is None else list(addr)
    ext, al, ov, bank, dom0 = inst.ext, inst.align, inst.ov, inst.bank, inst.dom0
    span = [None] * n
    for j in range(n):
        if addr[j] >= 0:
            span[j] = inst.unit_span(addr[j], ext[j])
    unit_span = inst.unit_span
    for i in order:
        if addr[i] >= 0:
            continue
        bi = bank[i]
        blocks = []
        for j in ov[i]:
            a = addr[j]
            if a >= 0:
                blocks.append(span[j] if j in bi else (a, a + ext[j]))
        blocks.sort()
        a = first_fit(dom0[i], al[i], ext[i], blocks)
        if a < 0:
            return addr, i
        addr[i] = a
        span[i] = unit_span(a, ext[i])
    return addr, -1

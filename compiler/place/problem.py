"""The per-tile placement problem and its solution: the one data model shared by
the allocator, the validator, the dumps and the place phase.

Struct-of-arrays: request i is (size[i], align[i], start[i], end[i], region[i],
count[i], stride[i]). A request with count > 1 is a Repeat sequence: `count`
members of `size` bytes at a fixed `stride`, placed as one unit occupying
[addr, addr + stride*(count-1) + size). Lifetimes are half-open [start, end) in
schedule events. Two requests joined by a bank edge must, while both are live,
touch disjoint memory-element units (`Target.bank_unit`: a 16 KiB element in
region 0, an element pair in region 1). A bank-separated sequence owns every
unit its whole extent touches. Reserved ranges [lo, hi) are support
reservations (code, exchange tables, profile samples) no request may overlap.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..target import CODE, INTERLEAVED, STANDARD  # noqa: F401  (re-exported region classes)

PLACED, INFEASIBLE, UNKNOWN = "placed", "infeasible", "unknown"


@dataclass
class Problem:
    # memory map (bytes; addresses absolute, as on the machine)
    memory_base: int
    region0_end: int
    memory_end: int
    element_bytes: int
    # requests
    size: np.ndarray                       # int64[n]
    align: np.ndarray                      # int64[n], powers of two
    start: np.ndarray                      # int64[n]
    end: np.ndarray                        # int64[n], end > start
    region: np.ndarray                     # int8[n]: STANDARD | INTERLEAVED | CODE
    count: np.ndarray | None = None        # int64[n], default 1
    stride: np.ndarray | None = None       # int64[n], default 0
    bank_edges: np.ndarray | None = None   # int64[e, 2] request index pairs
    reserved: np.ndarray | None = None     # int64[r, 2] [lo, hi) ranges
    names: list[str] | None = None
    max_alloc: int | None = None           # largest contiguous extent; default: a region

    def __post_init__(self):
        n = len(self.size)
        as64 = lambda a, fill: np.full(n, fill, np.int64) if a is None else np.asarray(a, np.int64)
        self.size = as64(self.size, 0)
        self.align = as64(self.align, 1)
        self.start = as64(self.start, 0)
        self.end = as64(self.end, 1)
        self.region = np.asarray(self.region, np.int8)
        self.count = as64(self.count, 1)
        self.stride = as64(self.stride, 0)
        self.bank_edges = (np.zeros((0, 2), np.int64) if self.bank_edges is None
                           else np.asarray(self.bank_edges, np.int64).reshape(-1, 2))
        self.reserved = (np.zeros((0, 2), np.int64) if self.reserved is None
                         else np.asarray(self.reserved, np.int64).reshape(-1, 2))

    def __len__(self) -> int:
        return len(self.size)

    @property
    def extent(self) -> np.ndarray:
        """Bytes a request occupies (a sequence's whole span)."""
        return self.stride * (self.count - 1) + self.size

    def name(self, i: int) -> str:
        return self.names[i] if self.names else f"#{i}"


@dataclass
class Solution:
    status: str                            # PLACED | INFEASIBLE | UNKNOWN
    addr: np.ndarray                       # int64[n]; -1 where not placed
    method: str = ""                       # which technique decided it
    nodes: int = 0                         # search nodes spent
    seconds: float = 0.0
    # why it failed (INFEASIBLE: a proof; UNKNOWN: the best failed attempt)
    event: int = -1                        # schedule event of the binding peak / failure
    live_bytes: int = 0
    available_bytes: int = 0
    request: int = -1                      # request that could not be placed, if any
    detail: dict = field(default_factory=dict)

    @property
    def deficit(self) -> int:
        return max(0, self.live_bytes - self.available_bytes)


class ProblemError(ValueError):
    """Malformed placement input; the one-line message names the request at fault."""


def check(p: Problem) -> None:
    """Reject bad input before any work: one line naming the request (or edge,
    or reserved range). Raises ProblemError."""
    n = len(p.size)
    for f in ("align", "start", "end", "region", "count", "stride"):
        if len(getattr(p, f)) != n:
            raise ProblemError(f"field {f!r} has {len(getattr(p, f))} entries, expected {n}")
    if p.names is not None and len(p.names) != n:
        raise ProblemError(f"names has {len(p.names)} entries, expected {n}")
    if not (p.memory_base <= p.region0_end <= p.memory_end) or p.memory_base >= p.memory_end:
        raise ProblemError("memory map: need memory_base <= region0_end <= memory_end, "
                           "memory_base < memory_end")
    if p.element_bytes <= 0:
        raise ProblemError("memory map: element_bytes must be positive")
    if p.max_alloc is not None and p.max_alloc <= 0:
        raise ProblemError("max_alloc must be positive")
    bad = lambda mask: int(np.flatnonzero(mask)[0]) if mask.any() else -1
    checks = [
        (p.size <= 0, lambda i: f"size {p.size[i]} must be positive"),
        ((p.align <= 0) | ((p.align & (p.align - 1)) != 0),
         lambda i: f"alignment {p.align[i]} is not a power of two"),
        (p.end <= p.start, lambda i: f"lifetime [{p.start[i]}, {p.end[i]}) is empty (end <= start)"),
        ((p.region < 0) | (p.region > 2), lambda i: f"region class {p.region[i]} is not 0, 1 or 2"),
        (p.count <= 0, lambda i: f"count {p.count[i]} must be positive"),
        ((p.count > 1) & (p.stride < p.size),
         lambda i: f"sequence stride {p.stride[i]} is smaller than its member size {p.size[i]}"),
        ((p.count > 1) & (p.stride % np.maximum(p.align, 1) != 0),
         lambda i: f"sequence stride {p.stride[i]} breaks member alignment {p.align[i]}"),
    ]
    for mask, msg in checks:
        i = bad(mask)
        if i >= 0:
            raise ProblemError(f"request {p.name(i)}: {msg(i)}")
    e = p.bank_edges
    if len(e):
        k = bad(((e < 0) | (e >= n)).any(axis=1))
        if k >= 0:
            raise ProblemError(f"bank edge {k} names unknown request index "
                               f"{int(e[k][(e[k] < 0) | (e[k] >= n)][0])}")
        k = bad(e[:, 0] == e[:, 1])
        if k >= 0:
            raise ProblemError(f"bank edge {k} joins request {p.name(int(e[k, 0]))} to itself")
    r = p.reserved
    if len(r):
        k = bad(r[:, 1] <= r[:, 0])
        if k >= 0:
            raise ProblemError(f"reserved range {k} [{r[k, 0]}, {r[k, 1]}) is empty")

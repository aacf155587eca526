"""Constraint dumps: a failing tile written as JSON that `python -m compiler.place`
can solve, validate and benchmark; and the plain CSV of public allocator
benchmarks.

JSON dump (format "tessera-place-dump/1"):

    {"format": "tessera-place-dump/1",
     "tile": 17,                                   # optional, informational
     "memory": {"memory_base": 311296, "region0_end": 524288, "memory_end": 950272,
                "element_bytes": 16384, "max_alloc": null},
     "reserved": [[lo, hi], ...],                  # support reservations, half-open bytes
     "requests": [{"name": "qkv.w", "size": 4096, "align": 64, "start": 0, "end": 9,
                   "region": "standard" | "interleaved" | "code",
                   "count": 1, "stride": 0}, ...],   # count/stride optional (Repeat sequence)
     "bank_edges": [["qkv.w", "x.act"], ...],      # by request name (or index)
     "addr": [...],                                # optional: a placement to validate
     "witness": [...]}                             # optional: a known-legal placement; the
                                                   # solver never reads it (corpus only)

Lifetimes are half-open [start, end) in schedule events; addresses absolute.
CSV (`id,lower,upper,size[,alignment]`, optional header): lifetimes half-open
[lower, upper); the capacity comes from the command line; the arena is one
region [0, capacity) with no bank or region constraints.

Bad input raises DumpError with one line naming the file and the request.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from .problem import CODE, INTERLEAVED, STANDARD, Problem, ProblemError, check

FORMAT = "tessera-place-dump/1"
_REGION = {"standard": STANDARD, "interleaved": INTERLEAVED, "code": CODE}
_REGION_NAME = {v: k for k, v in _REGION.items()}


class DumpError(ProblemError):
    """Malformed dump or CSV; one line naming the file and the request."""


def to_dict(p: Problem, *, tile: int | None = None, addr=None, witness=None) -> dict:
    n = len(p)
    names = [p.name(i) for i in range(n)]
    d = {"format": FORMAT}
    if tile is not None:
        d["tile"] = int(tile)
    d["memory"] = {"memory_base": int(p.memory_base), "region0_end": int(p.region0_end),
                   "memory_end": int(p.memory_end), "element_bytes": int(p.element_bytes),
                   "max_alloc": None if p.max_alloc is None else int(p.max_alloc)}
    d["reserved"] = p.reserved.tolist()
    reqs = []
    for i in range(n):
        r = {"name": names[i], "size": int(p.size[i]), "align": int(p.align[i]),
             "start": int(p.start[i]), "end": int(p.end[i]),
             "region": _REGION_NAME[int(p.region[i])]}
        if p.count[i] != 1:
            r["count"], r["stride"] = int(p.count[i]), int(p.stride[i])
        reqs.append(r)
    d["requests"] = reqs
    d["bank_edges"] = [[names[a], names[b]] for a, b in p.bank_edges.tolist()]
    if addr is not None:
        d["addr"] = [int(a) for a in addr]
    if witness is not None:
        d["witness"] = [int(a) for a in witness]
    return d


def save(path, p: Problem, **kw) -> None:
    Path(path).write_text(json.dumps(to_dict(p, **kw), separators=(",", ":")) + "\n")


def from_dict(d, where: str = "dump") -> tuple[Problem, dict]:
    """(problem, extras) where extras may hold 'addr', 'witness', 'tile'."""
    def fail(msg):
        raise DumpError(f"{where}: {msg}")

    if not isinstance(d, dict):
        fail("top level must be a JSON object")
    if d.get("format", FORMAT) != FORMAT:
        fail(f"unknown format {d.get('format')!r} (expected {FORMAT!r})")
    mem = d.get("memory")
    if not isinstance(mem, dict):
        fail("missing 'memory' object")
    for k in ("memory_base", "region0_end", "memory_end", "element_bytes"):
        if not isinstance(mem.get(k), int):
            fail(f"memory.{k} must be an integer")
    reqs = d.get("requests")
    if not isinstance(reqs, list):
        fail("missing 'requests' list")
    names, cols = [], {k: [] for k in ("size", "align", "start", "end", "region", "count", "stride")}
    for i, r in enumerate(reqs):
        if not isinstance(r, dict):
            fail(f"request #{i} is not an object")
        nm = str(r.get("name", f"#{i}"))
        names.append(nm)
        for k in ("size", "align", "start", "end"):
            if not isinstance(r.get(k), int) or isinstance(r.get(k), bool):
                fail(f"request {nm}: '{k}' must be an integer, got {r.get(k)!r}")
        reg = r.get("region", "standard")
        if reg not in _REGION and reg not in _REGION.values():
            fail(f"request {nm}: unknown region class {reg!r}")
        for k in ("size", "align", "start", "end"):
            cols[k].append(r[k])
        cols["region"].append(_REGION.get(reg, reg))
        for k, dflt in (("count", 1), ("stride", 0)):
            v = r.get(k, dflt)
            if not isinstance(v, int):
                fail(f"request {nm}: '{k}' must be an integer, got {v!r}")
            cols[k].append(v)
    if len(set(names)) != len(names):
        dup = next(x for x in names if names.count(x) > 1)
        fail(f"request name {dup!r} is not unique")
    index = {nm: i for i, nm in enumerate(names)}
    edges = []
    for k, e in enumerate(d.get("bank_edges", [])):
        if not isinstance(e, list) or len(e) != 2:
            fail(f"bank edge {k} must be a pair of request names")
        pair = []
        for x in e:
            if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < len(names):
                pair.append(x)
            elif isinstance(x, str) and x in index:
                pair.append(index[x])
            else:
                fail(f"bank edge {k} names unknown request {x!r}")
        edges.append(pair)
    res = d.get("reserved", [])
    if not isinstance(res, list) or any(not isinstance(r, list) or len(r) != 2 for r in res):
        fail("'reserved' must be a list of [lo, hi] pairs")
    try:
        p = Problem(mem["memory_base"], mem["region0_end"], mem["memory_end"], mem["element_bytes"],
                    size=np.array(cols["size"], np.int64), align=np.array(cols["align"], np.int64),
                    start=np.array(cols["start"], np.int64), end=np.array(cols["end"], np.int64),
                    region=np.array(cols["region"], np.int8),
                    count=np.array(cols["count"], np.int64), stride=np.array(cols["stride"], np.int64),
                    bank_edges=np.array(edges, np.int64).reshape(-1, 2),
                    reserved=np.array(res, np.int64).reshape(-1, 2), names=names,
                    max_alloc=mem.get("max_alloc"))
        check(p)
    except ProblemError as e:
        fail(str(e))
    extras = {k: d[k] for k in ("addr", "witness", "tile") if k in d}
    for k in ("addr", "witness"):
        if k in extras and (not isinstance(extras[k], list) or len(extras[k]) != len(names)):
            fail(f"'{k}' must list one address per request")
    return p, extras


def read_csv(text: str, capacity: int | None, where: str = "csv") -> Problem:
    if capacity is None or capacity <= 0:
        raise DumpError(f"{where}: a CSV problem needs a positive --capacity")
    ids, cols = [], {k: [] for k in ("lower", "upper", "size", "alignment")}
    for ln, row in enumerate(csv.reader(io.StringIO(text)), 1):
        row = [c.strip() for c in row]
        if not row or not any(row):
            continue
        if ln == 1 and not row[1].lstrip("-").isdigit():
            continue  # header
        if len(row) not in (4, 5):
            raise DumpError(f"{where}:{ln}: expected id,lower,upper,size[,alignment]")
        try:
            vals = [int(x) for x in row[1:]]
        except ValueError:
            raise DumpError(f"{where}:{ln}: request {row[0]}: non-integer field") from None
        ids.append(row[0])
        cols["lower"].append(vals[0])
        cols["upper"].append(vals[1])
        cols["size"].append(vals[2])
        cols["alignment"].append(vals[3] if len(vals) == 4 else 1)
    n = len(ids)
    p = Problem(0, capacity, capacity, capacity, size=np.array(cols["size"], np.int64),
                align=np.array(cols["alignment"], np.int64),
                start=np.array(cols["lower"], np.int64), end=np.array(cols["upper"], np.int64),
                region=np.zeros(n, np.int8), names=ids)
    try:
        check(p)
    except ProblemError as e:
        raise DumpError(f"{where}: {e}") from None
    return p


def load(path, capacity: int | None = None) -> tuple[Problem, dict]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror})") from None
    if path.suffix.lower() == ".csv":
        return read_csv(text, capacity, str(path)), {}
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise DumpError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    return from_dict(d, str(path))


def cases(paths) -> list[Path]:
    """Files named on the command line, folders expanded to their *.json / *.csv (sorted)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.suffix.lower() in (".json", ".csv"))
        else:
            out.append(p)
    return out

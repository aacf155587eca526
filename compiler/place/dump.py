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
CSV, the format of MiniMalloc and public allocator benchmarks: columns found by
header name, in any order: `id` or `buffer`; `lower`,`upper` (half-open
[lower, upper)) or `start`,`end` (inclusive: [start, end], MiniMalloc's
meaning); `size`; optional `alignment` (power of two, default 1); optional
`offset` (a placement: `validate` checks it; `solve` ignores it). A file without
a header is positional `id,lower,upper,size[,alignment]`. Blank lines and lines
starting with `#` are skipped. The capacity comes from `--capacity` or the file
name (`NAME.<capacity>.csv`); the arena is one region [0, capacity) with no
bank or region constraints. Solutions are written as the input's columns plus
`offset`.

Bad input raises DumpError with one line naming the file and the request.
"""
from __future__ import annotations

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
    names = _unique_names([p.name(i) for i in range(n)])
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


def _unique_names(names: list[str]) -> list[str]:
    """Names as the dump keys them: bank edges name requests, so a repeated name (two
    requests of one tensor on a tile, e.g. an operand and its staging copy) gets `~k`,
    its k-th repeat, or the dump could not be read back (#26: the place phase's dumps of
    ring-unit tiles were refused by `load`)."""
    seen: dict[str, int] = {}
    out = []
    for nm in names:
        k = seen.get(nm, 0)
        seen[nm] = k + 1
        out.append(nm if k == 0 else f"{nm}~{k}")
    taken = set(out)
    if len(taken) != len(out):         # a given name already ends in ~k: fall back to indices
        out = [f"{nm}#{i}" for i, nm in enumerate(names)]
    return out


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


# CSV columns by header name (MiniMalloc's names and ours); `start,end` is an
# inclusive lifetime (MiniMalloc: upper = end + 1), `lower,upper` half-open.
_COLS = {"id": "id", "buffer": "id", "lower": "lower", "start": "start", "upper": "upper",
         "end": "end", "size": "size", "alignment": "alignment", "offset": "offset"}
_POSITIONAL = ["id", "lower", "upper", "size", "alignment"]   # headerless files


def _csv_fail(where, ln, msg):
    raise DumpError(f"{where}:{ln}: {msg}")


def _csv_rows(text, where):
    """(line number, fields) of each data line; blank and `#` comment lines skipped."""
    out = []
    for ln, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        f = [c.strip() for c in s.split(",")]
        if len(f) == 1:
            d = next((c for c in (";", "\t", "|", " ") if c in s), None)
            _csv_fail(where, ln, "one field; fields must be separated by ','"
                      + (f" (found {d!r})" if d else ""))
        out.append((ln, f))
    if not out:
        raise DumpError(f"{where}:1: empty CSV (no header, no buffers)")
    return out


def _int(where, ln, col, v):
    try:
        return int(v)
    except ValueError:
        _csv_fail(where, ln, f"column {col!r}: {v!r} is not an integer")


def read_csv_full(text: str, capacity: int | None, where: str = "csv"):
    """(problem, extras): extras['addr'] from an `offset` column (every row set),
    extras['csv'] = (header, rows) to write a solution back in the same columns."""
    if capacity is None or capacity <= 0:
        raise DumpError(f"{where}: a CSV problem needs a positive --capacity "
                        "(or a file name like NAME.<capacity>.csv)")
    rows = _csv_rows(text, where)
    hln, head = rows[0]
    names = head
    if all(h.lower() in _COLS for h in head):
        header = [_COLS[h.lower()] for h in head]
        rows = rows[1:]
        for k, h in enumerate(header):
            if header.index(h) != k:
                _csv_fail(where, hln, f"column {head[k]!r} repeats {head[header.index(h)]!r}")
        if ("lower" in header) + ("start" in header) != 1 or ("upper" in header) + ("end" in header) != 1:
            _csv_fail(where, hln, "header needs one of lower/start and one of upper/end")
        if ("lower" in header) != ("upper" in header):
            _csv_fail(where, hln, "mixed lifetime columns: use lower,upper (half-open) "
                      "or start,end (inclusive)")
        for req in ("id", "size"):
            if req not in header:
                _csv_fail(where, hln, f"header lacks column {req!r} (or 'buffer' for id)"
                          if req == "id" else f"header lacks column {req!r}")
        if not rows:
            _csv_fail(where, hln, "header but no buffers")
    elif any(not h.lstrip("-").isdigit() for h in head[1:]):
        bad = next(h for h in head if h.lower() not in _COLS)
        _csv_fail(where, hln, f"unknown column {bad!r} (known: id|buffer, lower|start, "
                  "upper|end, size, alignment, offset)")
    else:
        if len(head) not in (4, 5):
            _csv_fail(where, hln, "headerless CSV expects id,lower,upper,size[,alignment]")
        header = names = _POSITIONAL[:len(head)]
    inclusive = "end" in header
    ids, cols = [], {k: [] for k in ("lower", "upper", "size", "alignment", "offset")}
    seen = {}
    for ln, f in rows:
        if len(f) != len(header):
            _csv_fail(where, ln, f"{len(f)} fields, expected {len(header)} ({','.join(header)})")
        v = dict(zip(header, f))
        rid = v["id"]
        if rid in seen:
            _csv_fail(where, ln, f"buffer {rid!r} repeats line {seen[rid]}")
        seen[rid] = ln
        lo = _int(where, ln, "lower/start", v.get("lower", v.get("start")))
        hi = _int(where, ln, "upper/end", v.get("upper", v.get("end"))) + inclusive
        size = _int(where, ln, "size", v["size"])
        al = _int(where, ln, "alignment", v["alignment"]) if v.get("alignment") else 1
        if size <= 0:
            _csv_fail(where, ln, f"buffer {rid}: size {size} must be positive")
        if hi <= lo:
            _csv_fail(where, ln, f"buffer {rid}: lifetime "
                      + (f"[{lo}, {hi - 1}] (inclusive end)" if inclusive else f"[{lo}, {hi})")
                      + " is empty")
        if al <= 0 or al & (al - 1):
            _csv_fail(where, ln, f"buffer {rid}: alignment {al} is not a power of two")
        ids.append(rid)
        cols["lower"].append(lo)
        cols["upper"].append(hi)
        cols["size"].append(size)
        cols["alignment"].append(al)
        off = v.get("offset", "")
        cols["offset"].append(_int(where, ln, "offset", off) if off else None)
    n = len(ids)
    p = Problem(0, capacity, capacity, capacity, size=np.array(cols["size"], np.int64),
                align=np.array(cols["alignment"], np.int64),
                start=np.array(cols["lower"], np.int64), end=np.array(cols["upper"], np.int64),
                region=np.zeros(n, np.int8), names=ids)
    try:
        check(p)
    except ProblemError as e:
        raise DumpError(f"{where}: {e}") from None
    keep = [k for k, h in enumerate(header) if h != "offset"]
    extras = {"csv": ([names[k] for k in keep], [[f[k] for k in keep] for _, f in rows])}
    if "offset" in header and all(o is not None for o in cols["offset"]):
        extras["addr"] = cols["offset"]
    return p, extras


def read_csv(text: str, capacity: int | None, where: str = "csv") -> Problem:
    return read_csv_full(text, capacity, where)[0]


def write_csv(path, p: Problem, addr, extras: dict | None = None) -> None:
    """The input's columns (or id,lower,upper,size,alignment) plus `offset`."""
    if extras and "csv" in extras:
        header, rows = extras["csv"]
    else:
        header = ["id", "lower", "upper", "size", "alignment"]
        rows = [[p.name(i), int(p.start[i]), int(p.end[i]), int(p.extent[i]), int(p.align[i])]
                for i in range(len(p))]
    lines = [",".join(map(str, [*header, "offset"]))]
    lines += [",".join(map(str, [*r, int(a)])) for r, a in zip(rows, addr)]
    Path(path).write_text("\n".join(lines) + "\n")


def to_csv_text(p: Problem) -> tuple[str, int]:
    """(CSV text, capacity): the lifetime x size x alignment relaxation of a tile
    problem for allocators that know only that: offsets relative to memory_base,
    capacity = the tile's free bytes (memory less reserved ranges); regions,
    bank edges and reserved ranges are left out (the JSON dump keeps them)."""
    cap = int(p.memory_end - p.memory_base - (p.reserved[:, 1] - p.reserved[:, 0]).sum())
    lines = ["id,lower,upper,size,alignment"]
    lines += [f"{p.name(i).replace(',', ';')},{int(p.start[i])},{int(p.end[i])},{int(p.extent[i])},{int(p.align[i])}"
              for i in range(len(p))]
    return "\n".join(lines) + "\n", cap


def capacity_from_name(path) -> int | None:
    """MiniMalloc's benchmark files name their capacity: `A.1048576.csv`."""
    parts = Path(path).name.split(".")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def load(path, capacity: int | None = None) -> tuple[Problem, dict]:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DumpError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if path.suffix.lower() == ".csv":
        return read_csv_full(text, capacity or capacity_from_name(path), str(path))
    if not text.strip():
        raise DumpError(f"{path}:1: empty file")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise DumpError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
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

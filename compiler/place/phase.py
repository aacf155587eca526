"""The place phase: per finalist, per tile, support reservations first, then the
tensors through `solve`. Tiles whose problems are identical (the common case on a
regular grid) are solved once. The first finalist whose every tile places wins;
otherwise the trial is rejected naming tile, event, live, available and deficit bytes.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .. import mapper as mappers
from ..expand.analysis import profile_bytes
from ..result import Rejection
from ..target import Target
from .config import PlaceConfig
from .dump import to_csv_text, to_dict
from .problem import PLACED, Problem
from .solve import solve

CHUNK = 64          # distinct tile problems per task (tasks of >= ~100 ms)
SUPPORT_ALIGN = 8


@dataclass
class Support:
    """Per-tile support reservations: code and exchange table in region 0 (code may
    live only there), profile samples at the top of region 1."""
    code_addr: np.ndarray
    table_addr: np.ndarray
    profile_addr: np.ndarray
    ranges: np.ndarray          # int64[tiles, 3, 2] reserved [lo, hi) per tile


def reserve_support(a: dict, tiles: int, prof_bytes: int, t: Target) -> Support:
    up = lambda x: -(-x // SUPPORT_ALIGN) * SUPPORT_ALIGN
    code = np.full(tiles, t.memory_base, np.int64)
    table = code + up(a["code_bytes"])
    prof = np.full(tiles, (t.memory_end - prof_bytes) // SUPPORT_ALIGN * SUPPORT_ALIGN, np.int64)
    ranges = np.stack([np.stack([code, code + a["code_bytes"]], 1),
                       np.stack([table, table + a["table_bytes"]], 1),
                       np.stack([prof, prof + prof_bytes], 1)], 1)
    return Support(code, table, prof, ranges)


def tile_problems(tg, support: Support, t: Target):
    """Problem per tile (None for tiles with no requests) and each tile's request rows."""
    r = tg.req
    order = np.argsort(r["tile"], kind="stable")
    bounds = np.searchsorted(r["tile"][order], np.arange(tg.tiles + 1))
    local = np.empty(len(order), np.int64)
    local[order] = np.arange(len(order)) - bounds[r["tile"][order]]
    edges_by_tile = r["tile"][tg.bank[:, 0]] if len(tg.bank) else np.zeros(0, np.int64)
    problems, rows = [], []
    for tile in range(tg.tiles):
        idx = order[bounds[tile]:bounds[tile + 1]]
        rows.append(idx)
        e = tg.bank[edges_by_tile == tile]
        problems.append(Problem(
            t.memory_base, t.region0_end, t.memory_end, t.element_bytes,
            size=r["size"][idx], align=r["align"][idx], start=r["start"][idx], end=r["end"][idx],
            region=r["region"][idx], count=r["count"][idx], stride=r["stride"][idx],
            bank_edges=local[e], reserved=_nonempty(support.ranges[tile]),
            names=[f"{tg.names[n]}@tile{tile}" for n in r["name"][idx]]))
    return problems, rows


def support_problem_of(place_res, tile: int, t: Target):
    """The placement problem of one tile of a placed trial and its request rows
    (for validation, dumps and debugging)."""
    problems, rows = tile_problems(place_res.tilegraph, place_res.placement.support, t)
    return problems[tile], rows[tile]


def _nonempty(ranges: np.ndarray) -> np.ndarray:
    return ranges[ranges[:, 1] > ranges[:, 0]]


def _digest(p: Problem) -> str:
    h = hashlib.sha256()
    for a in (p.size, p.align, p.start, p.end, p.region, p.count, p.stride, p.bank_edges, p.reserved):
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    return h.hexdigest()


def distinct(problems: list[Problem]) -> tuple[list, list, dict]:
    """Each tile problem's digest, the distinct digests in first-tile order (deterministic)
    and each one's first tile: tiles whose problems are identical are solved once."""
    keys = [_digest(p) for p in problems]
    uniq = sorted(set(keys), key=keys.index)
    return keys, uniq, {k: keys.index(k) for k in uniq}


def solve_chunk(problems: list[Problem], place_cfg: PlaceConfig):
    """Solutions in order; with `stop_at_failure` the list ends at the first tile that
    failed (a finalist with one failed tile is rejected whatever its others do)."""
    out = []
    for p in problems:
        out.append(solve(p, place_cfg))
        if place_cfg.stop_at_failure and out[-1].status != PLACED:
            break
    return out


@dataclass
class Placement:
    finalist: int
    addr: np.ndarray            # int64 per tile-graph request row
    support: Support
    methods: dict               # technique -> tiles it placed
    min_free_bytes: int


@dataclass
class PlaceResult:
    placement: Placement | None = None
    tilegraph: object = None
    attempts: list = field(default_factory=list)    # per finalist tried: outcome counts
    rejection: Rejection | None = None
    # (file name, text) per dumped tile problem (policy.place.dump): <name>.json is
    # exact; <name>.<capacity>.csv its lifetime x size relaxation for other allocators
    dumps: list = field(default_factory=list)

    def metrics(self) -> dict:
        p = self.placement
        m = self.attempts[-1] if self.attempts else {}
        return {"tiles": {"greedy": m.get("greedy", 0), "search": m.get("search", 0),
                          "failed": m.get("failed", 0)},
                "distinct_problems": m.get("distinct", 0),
                "finalist": p.finalist if p else None,
                "min_free_bytes": p.min_free_bytes if p else None}


def place_finalist(tg, t: Target, place_cfg: PlaceConfig, mapper):
    # a tile graph placed as part of a bigger program (a pipeline group, compiler/spatial.py)
    # states that program's profile reservation
    support = reserve_support(tg.analysis, tg.tiles, tg.analysis.get("profile_bytes", profile_bytes(tg)), t)
    problems, rows = tile_problems(tg, support, t)
    keys, uniq, first = distinct(problems)
    chunks = [[problems[first[k]] for k in uniq[i:i + CHUNK]] for i in range(0, len(uniq), CHUNK)]
    sols = mapper("place", solve_chunk, chunks, lambda acc, i, r: {**acc, i: r}, {},
                  dict(place_cfg=place_cfg.solver_key()))
    by_key = {k: s for i in range(len(chunks)) for k, s in zip(uniq[i * CHUNK:], sols[i])}
    addr = np.full(len(tg.req["tile"]), -1, np.int64)
    counts = Counter(distinct=len(uniq))
    worst = None
    free = []
    for tile in range(tg.tiles):
        s = by_key.get(keys[tile])
        if s is None:                   # not solved: its chunk stopped at a failed tile
            counts["skipped"] += 1
        elif s.status == PLACED:
            addr[rows[tile]] = s.addr
            counts["greedy" if s.method.startswith(("greedy", "empty")) else "search"] += 1
            free.append(t.tile_bytes - int(np.diff(support.ranges[tile]).sum()) - _peak_live(problems[tile]))
        else:
            counts["failed"] += 1
            if worst is None or s.deficit > worst[1].deficit:
                worst = (tile, s)
    dumps = []
    if place_cfg.dump != "none":
        for k in uniq:
            s = by_key.get(k)
            if s is not None and (place_cfg.dump == "all" or s.status != PLACED):
                dumps += dump_files(f"tile{first[k]}", problems[first[k]], first[k], s)
    return support, addr, counts, worst, (min(free) if free else 0), dumps


def dump_files(name, p: Problem, tile: int, sol) -> list:
    """A tile problem as files for the CLI, another allocator or a bug report."""
    d = to_dict(p, tile=tile, addr=sol.addr if sol.status == PLACED else None)
    d["solution"] = {"status": sol.status, "method": sol.method, "nodes": sol.nodes,
                     "event": sol.event, "live_bytes": sol.live_bytes,
                     "available_bytes": sol.available_bytes, "deficit": sol.deficit}
    text, cap = to_csv_text(p)
    return [(f"{name}.json", json.dumps(d, separators=(",", ":")) + "\n"),
            (f"{name}.{cap}.csv", text)]


def _peak_live(p: Problem) -> int:
    ev = np.unique(np.concatenate([p.start, p.end]))
    live = [(p.extent * ((p.start <= e) & (e < p.end))).sum() for e in ev]
    return int(max(live, default=0))


def place(expand_res, t: Target, place_cfg: PlaceConfig, mapper=mappers.serial) -> PlaceResult:
    if expand_res.rejection:
        return PlaceResult(rejection=expand_res.rejection)
    res = PlaceResult()
    worst_overall = None
    for i, fin in enumerate(expand_res.finalists):
        tg = fin.tilegraph
        support, addr, counts, worst, min_free, dumps = place_finalist(tg, t, place_cfg, mapper)
        res.attempts.append(dict(counts))
        res.dumps += [(f"f{i}-{n}", text) for n, text in dumps]
        if worst is None:
            res.placement = Placement(i, addr, support, dict(counts), min_free)
            res.tilegraph = tg
            return res
        if worst_overall is None:
            worst_overall = worst
    tile, s = worst_overall
    res.rejection = Rejection(
        "place", "placement", rejection_text(tile, s),
        dict(tile=int(tile), event=int(s.event), live_bytes=int(s.live_bytes),
             available_bytes=int(s.available_bytes), deficit_bytes=int(s.deficit), outcome=s.status))
    return res


# the bound's region proofs (bound.py): live bytes only that region can hold, against its free bytes
_REGION_PROOF = {"bound-live-region1": "region 1", "bound-live-region0": "region 0"}


def rejection_text(tile: int, s) -> str:
    """One line naming tile, event, live, available and deficit bytes (and the region
    when the proof is a region's; bound.py's unit proofs count bank-separated sequences
    in whole units)."""
    units = s.method.endswith("-units")
    r = _REGION_PROOF.get(s.method.removesuffix("-units"))
    live = (f"{s.live_bytes} B live" + (" counting bank-separated sequences in whole units" if units else "")
            + (f" that only {r} can hold" if r else ""))
    return (f"tile {tile} {s.status}: {live} at event {s.event}, {s.available_bytes} B "
            f"available{' in ' + r if r else ''} (deficit {s.deficit} B)"
            + (f", request {s.request}" if s.request >= 0 else ""))

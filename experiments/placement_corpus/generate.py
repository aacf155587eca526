"""Placement corpus generator (the construction of seeds/placement-search.md).

Banked sets (main: 100 cases with a ninth, spare element; tight: 10 cases,
eight elements only). Eight 16 KiB elements (four in region 0, four = two
interleaved pairs in region 1) are each cut into random lanes; each lane holds
buffers with sequential random lifetimes, each 75-100 % of the lane's width;
bank edges join simultaneously live buffers in different bank units (an
element in region 0, an element pair in region 1); region-1 buffers are mixed
standard/interleaved; alignments 8/32/64; requests shuffled. The construction
(each buffer at its lane's start) is a feasible witness: it is checked by the
independent validator and stored under "witness", which the solver never reads.

Zero-slack set: pure lifetime/size instances of 150-450 buffers made by
guillotine-cutting the rectangle time x [0, capacity) into buffers, so peak
live bytes equal the capacity exactly (at every event) and the cut is the witness.

Hard set (`hard`, 36 cases): pure lifetime x size at 1 MiB, 150-1000 buffers,
in three shapes: `guillotine` (as above, 1000 events), `heavy` (guillotine
with cut points skewed to the edges: heavy-tailed sizes and lifetimes) and
`trace` (a forward pass: long-lived bands around many 1-3-op activations);
every other size near-zero slack (each size shrunk by <= 1 %), the others
zero slack. The construction is the witness (validated, stored).

    python experiments/placement_corpus/generate.py [--out experiments/placement_corpus/cases]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from compiler.place import Problem, validate  # noqa: E402
from compiler.place.dump import save  # noqa: E402

E = 16384
BASE = 0x4C000
SEED0 = 20260912


def banked(seed: int, spare: bool, horizon: int = 24, edge_p: float = 0.02):
    rng = np.random.default_rng(seed)
    r0_elems = 4 + (1 if spare else 0)
    r0 = BASE + r0_elems * E
    top = r0 + 4 * E
    # witness elements: region-0 elements 0..3, region-1 elements 0..3 (pairs 0,1)
    elems = [(BASE + k * E, k, 0) for k in range(4)] + \
            [(r0 + k * E, r0_elems + k // 2, 1) for k in range(4)]
    rows = []  # (size, align, start, end, region, witness addr, unit)
    for lo, unit, reg in elems:
        nl = int(rng.integers(1, 4))
        cuts = np.sort(rng.choice(np.arange(1, E // 64), nl - 1, replace=False)) * 64 if nl > 1 else []
        bounds = [0, *map(int, cuts), E]
        for a, b in zip(bounds[:-1], bounds[1:]):
            w = b - a
            t = int(rng.integers(0, 3))
            while t < horizon:
                ln = int(rng.integers(1, 7))
                s, e = t, min(horizon, t + ln)
                al = int(rng.choice([8, 32, 64]))
                size = int(rng.integers(int(0.75 * w), w + 1))
                region = int(rng.random() < 0.5) if reg == 1 else 0
                rows.append((max(8, size), al, s, e, region, lo + a, unit))
                t = e + int(rng.random() < 0.2)
    n = len(rows)
    perm = rng.permutation(n)
    rows = [rows[k] for k in perm]
    size, align, start, end, region, wit, unit = map(np.array, zip(*rows))
    edges = []
    for i in range(n):
        for j in range(i + 1, n):
            if unit[i] != unit[j] and start[i] < end[j] and start[j] < end[i] and rng.random() < edge_p:
                edges.append((i, j))
    p = Problem(BASE, r0, top, E, size=size, align=align, start=start, end=end, region=region,
                bank_edges=np.array(edges, np.int64).reshape(-1, 2),
                names=[f"b{i}" for i in range(n)])
    errs = validate(p, wit)
    assert not errs, errs[:3]
    return p, wit


def zero_slack(seed: int, n: int, capacity: int = 1 << 20, horizon: int = 1000):
    """Guillotine cut of [0, horizon) x [0, capacity) into n rectangles."""
    rng = np.random.default_rng(seed)
    rects = [(0, horizon, 0, capacity)]  # t0, t1, a0, a1
    while len(rects) < n:
        areas = np.array([(r[1] - r[0]) * (r[3] - r[2]) for r in rects], float)
        k = int(rng.choice(len(rects), p=areas / areas.sum()))
        t0, t1, a0, a1 = rects[k]
        cut_time = rng.random() < 0.5
        if cut_time and t1 - t0 >= 2:
            c = int(rng.integers(t0 + 1, t1))
            new = [(t0, c, a0, a1), (c, t1, a0, a1)]
        elif a1 - a0 >= 16:
            c = int(rng.integers(a0 + 1, a1))
            new = [(t0, t1, a0, c), (t0, t1, c, a1)]
        else:
            continue
        rects[k:k + 1] = new
    perm = rng.permutation(n)
    rects = [rects[k] for k in perm]
    t0, t1, a0, a1 = map(np.array, zip(*rects))
    p = Problem(0, capacity, capacity, capacity, size=a1 - a0, align=np.ones(n, np.int64),
                start=t0, end=t1, region=np.zeros(n, np.int8), names=[f"z{i}" for i in range(n)])
    assert not validate(p, a0)
    return p, a0


def _finish(rects, rng, cap, prefix, slack=0.0):
    """Shuffle the rectangles (t0, t1, a0, a1) into a pure problem whose witness
    is each rectangle's a0; `slack` > 0 shrinks each size by up to that fraction
    (near-zero slack: the witness stays legal)."""
    n = len(rects)
    rects = [rects[k] for k in rng.permutation(n)]
    t0, t1, a0, a1 = map(np.array, zip(*rects))
    size = a1 - a0
    if slack:
        size = np.maximum(1, size - (rng.random(n) * slack * size).astype(np.int64))
    p = Problem(0, cap, cap, cap, size=size, align=np.ones(n, np.int64), start=t0, end=t1,
                region=np.zeros(n, np.int8), names=[f"{prefix}{i}" for i in range(n)])
    assert not validate(p, a0)
    return p, a0


def guillotine(seed, n, cap=1 << 20, horizon=1000, heavy=False, slack=0.0):
    """Guillotine cut of time x [0, cap); heavy: cut points skewed to the edges
    (u^3), so sizes and lifetimes are heavy-tailed (slivers beside giants)."""
    rng = np.random.default_rng(seed)
    rects = [(0, horizon, 0, cap)]
    frac = (lambda: rng.random() ** 3 if rng.random() < 0.5 else 1 - rng.random() ** 3) if heavy \
        else rng.random
    while len(rects) < n:
        areas = np.array([(r[1] - r[0]) * (r[3] - r[2]) for r in rects], float)
        k = int(rng.choice(len(rects), p=areas / areas.sum()))
        t0, t1, a0, a1 = rects[k]
        if rng.random() < 0.5 and t1 - t0 >= 2:
            c = min(t1 - 1, max(t0 + 1, t0 + int(frac() * (t1 - t0))))
            rects[k:k + 1] = [(t0, c, a0, a1), (c, t1, a0, a1)]
        elif a1 - a0 >= 16:
            c = min(a1 - 1, max(a0 + 1, a0 + int(frac() * (a1 - a0))))
            rects[k:k + 1] = [(t0, t1, a0, c), (t0, t1, c, a1)]
    return _finish(rects, rng, cap, "h" if heavy else "g", slack)


def trace(seed, n, cap=1 << 20, ops=None, slack=0.0):
    """A network forward pass: ops in sequence; long-lived buffers (weights kept
    resident, skip connections, KV) each a band of address over many ops, and
    around them many short activations (live 1-3 ops, produced by one op and
    consumed by the next few), filling the free address at every op exactly.
    Built by recursive cuts: a window of ops either splits in time, or peels a
    long-lived band off its bottom or top; windows of at most 3 ops become activations."""
    rng = np.random.default_rng(seed)
    ops = ops or max(40, n // 3)
    done, todo = [], [(0, ops, 0, cap)]
    while todo and len(done) + len(todo) < n:
        k = int(rng.integers(len(todo)))
        t0, t1, a0, a1 = todo.pop(k)
        w = a1 - a0
        if t1 - t0 > 3 and w >= 64 and rng.random() < 0.35:   # a long-lived band
            h = max(32, int(w * rng.uniform(0.05, 0.3)))
            if rng.random() < 0.5:                             # below or above the rest
                done.append((t0, t1, a0, a0 + h))
                todo.append((t0, t1, a0 + h, a1))
            else:
                done.append((t0, t1, a1 - h, a1))
                todo.append((t0, t1, a0, a1 - h))
        elif t1 - t0 > 3 and rng.random() < 0.8:                # split the ops window
            c = int(rng.integers(t0 + 1, t1))
            todo += [(t0, c, a0, a1), (c, t1, a0, a1)]
        elif w >= 64:                                          # activations side by side
            c = a0 + int(w * rng.uniform(0.2, 0.8))
            todo += [(t0, t1, a0, c), (t0, t1, c, a1)]
        else:
            done.append((t0, t1, a0, a1))
    return _finish(done + todo, rng, cap, "t", slack)


# the hard set: (shape, generator) x sizes 150..1000, every other one near-zero slack
HARD_SHAPES = [("guillotine", lambda s, n, sl: guillotine(s, n, slack=sl)),
               ("heavy", lambda s, n, sl: guillotine(s, n, heavy=True, slack=sl)),
               ("trace", lambda s, n, sl: trace(s, n, slack=sl))]
HARD_SIZES = [150, 200, 250, 300, 350, 400, 500, 600, 700, 800, 900, 1000]


def hard(out: Path, seed0: int = SEED0 + 5000):
    """>= 30 pure lifetime x size instances at 1 MiB, zero slack (peak live =
    capacity) or near-zero (sizes shrunk by <= 1 %), witness stored."""
    (out / "hard").mkdir(parents=True, exist_ok=True)
    k = 0
    for shape, gen in HARD_SHAPES:
        for j, n in enumerate(HARD_SIZES):
            sl = 0.01 if j % 2 else 0.0
            p, w = gen(seed0 + k, n, sl)
            tag = "nz" if sl else "z"
            save(out / "hard" / f"{shape}-{n}-{tag}-{seed0 + k}.json", p, witness=w)
            k += 1
    return k


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "cases"))
    ap.add_argument("--main", type=int, default=100)
    ap.add_argument("--tight", type=int, default=10)
    ap.add_argument("--zero-slack", type=int, default=12)
    ap.add_argument("--no-hard", action="store_true", help="skip the hard set")
    ap.add_argument("--hard-seed0", type=int, default=SEED0 + 5000,
                    help="first seed of the hard set (another value: fresh instances "
                         "of the same shapes, a check against tuning to these)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    for sub in ("main", "tight", "zeroslack"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for k in range(a.main):
        p, w = banked(SEED0 + k, spare=True)
        save(out / "main" / f"main-{SEED0 + k}.json", p, witness=w)
    for k in range(a.tight):
        p, w = banked(SEED0 + k, spare=False)
        save(out / "tight" / f"tight-{SEED0 + k}.json", p, witness=w)
    sizes = np.linspace(150, 450, a.zero_slack).round().astype(int) if a.zero_slack else []
    for k, n in enumerate(sizes):
        p, w = zero_slack(SEED0 + k, int(n))
        save(out / "zeroslack" / f"zs-{int(n)}-{SEED0 + k}.json", p, witness=w)
    nh = 0 if a.no_hard else hard(out, a.hard_seed0)
    print(f"wrote {a.main} main, {a.tight} tight, {len(sizes)} zero-slack, {nh} hard cases to {out}")


if __name__ == "__main__":
    main()

"""Per-op cycles of one layer, before and after, side by side (from ops/<label>.csv, written
by trial.py; `f16-4-before.csv` is the default trial's metrics/plots/ops.csv at the start
commit 1bf6f91).

    python experiments/fuse/summary.py BEFORE AFTER [AFTER2 ...]

Rows: the layer's ops (those with cycles in any trial), each kind (matmul, vector, exchange,
sync) and the total; the last row sums them (= run.cycles_per_layer)."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = ("matmul", "vector", "exchange", "sync", "total")


def load(label: str) -> dict:
    with open(HERE / "ops" / f"{label}.csv") as f:
        return {r["name"]: {k: float(r[k]) for k in KINDS} for r in csv.DictReader(f)}


def main(labels: list[str]) -> None:
    runs = [load(lb) for lb in labels]
    names = [n for n in runs[0] if any(sum(r.get(n, {}).get(k, 0) for k in KINDS) for r in runs)]
    for r in runs[1:]:
        names += [n for n in r if n not in names and sum(r[n].values())]
    head = " | ".join(f"{k} {lb}" for k in ("vector", "total") for lb in labels)
    print(f"| op | matmul {' / '.join(labels)} | {head} |")
    print("|---|---:|" + "---:|" * (2 * len(labels)))
    for n in names:
        get = lambda r, k: r.get(n, {}).get(k, 0)
        mm = " / ".join(f"{get(r, 'matmul'):,.0f}" for r in runs)
        cells = " | ".join(f"{get(r, k):,.0f}" for k in ("vector", "total") for r in runs)
        print(f"| {n} | {mm} | {cells} |")
    tot = lambda r, k: sum(v[k] for v in r.values())
    mm = " / ".join(f"{tot(r, 'matmul'):,.0f}" for r in runs)
    cells = " | ".join(f"**{tot(r, k):,.0f}**" for k in ("vector", "total") for r in runs)
    print(f"| layer | {mm} | {cells} |")
    print("\nby kind: " + "; ".join(f"{lb}: " + ", ".join(f"{k} {tot(r, k):,.0f}" for k in KINDS)
                                    for lb, r in zip(labels, runs)))


if __name__ == "__main__":
    main(sys.argv[1:])

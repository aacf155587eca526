"""Where the short depths' speed comes from: per encoder matmul of the So400m tower at
4 layers, the best plan (default policy) against the best plan whose resident weights
are not replicated (policy.resident_replication=1), and what each would need at 27.

    python experiments/depth_sweep/replication.py [layers] > experiments/depth_sweep/replication.md

Per matmul: the weight mode of the candidate expand ranks first (R = resident where
read, H = gathered from its home every layer), its grid, the replication (gm: the
tiles holding each resident block), the resident bytes per tile of the grid at this
depth (count × the padded block) and what the grid's blocks would need resident at
27 layers, and the exact cycles of the
supersteps the matmul opens in one layer (expand's analysis: the B exchange of a homes
grid, A's exchange, the MATMUL kernels and a k-split's reduction). Region 1 holds
416 KiB per tile. Plans and expands only (no placement or simulator run)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import run_phase  # noqa: E402
from compiler.plan import weight_modes  # noqa: E402
from compiler.target import DTYPE_BYTES  # noqa: E402
from pipeline.config import compose  # noqa: E402

FULL = 27


def best(layers: int, overrides: list):
    cfg = compose(["model=vit", "target=ipu21", f"model.layers={layers}", *overrides])
    res = {}
    for name in ("model", "plan", "expand"):
        res[name] = run_phase(name, res, cfg)
    e = res["expand"].finalists[0]
    return res["model"].graph, e


def main(layers: int):
    rows = {}
    for label, over in (("best", []), ("no replication", ["policy.resident_replication=1"])):
        g, e = best(layers, over)
        modes = weight_modes(g, e.candidate)
        for n, gr in e.candidate.strategy:
            w = g.ops[n].inputs[1]
            if g.repeat and w in g.repeat.sequences:
                block = -(-gr.kb * gr.nb * DTYPE_BYTES[g.tensors[w].dtype] // 16) * 16
                rows.setdefault(w, {})[label] = (modes[w], block, e.op_cycles.get(n, 0))
        rows.setdefault("_total", {})[label] = e.analysis["cycles"]
    print(f"| weight ({layers} layers) | plan | mode | grid | replication | resident B / tile | at {FULL} layers "
          "| cycles / layer |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for w, by in rows.items():
        if w == "_total":
            continue
        for label, (m, block, cyc) in by.items():
            print(f"| {w} | {label} | {m['mode']} | {m['grid']} | {m['replication'] or '-'} | "
                  f"{m['resident_bytes']:,} | {FULL * block:,} | {cyc:,} |")
    print()
    print(" · ".join(f"{label}: {c:,} cycles in all" for label, c in rows["_total"].items()))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)

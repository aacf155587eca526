"""Where a matmul's AMP cycles go, term by term, for the per-tile shapes a trial's plan chose,
and what the AMP estimate asks of a shape to run near the AMP's rate.

    python experiments/fuse/amp.py [LABEL ...]      (default: every ops/*.json of this folder)

For each matmul of one So400m encoder layer (its grid from the placed candidate's label in
ops/LABEL.json, written by trial.py), the largest tile's block (mb, kb, nb) and PopLibs'
ConvPartial1x1Out estimate (compiler/costs/amp.py, the same functions the simulator charges)
split into: the AMP floor (m·k·n / MACs a cycle), channel-group padding (a ragged k or n
block pays for whole 16-wide groups), row imbalance (6 workers: the pass lasts as long as
the worker with ceil(m/6) rows), per-pass overhead (worker start-up, supervisor loops,
weight loads: ~171 cycles a pass for f16 whatever m), and the f32 -> f16 output cast.
Then `frontier`: the efficiency of the estimate against mb alone (k, n whole groups),
and the operand bytes a tile must receive for it, which is what limits mb (A is sent
to each of the gn tiles of its row, B resident)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.costs import amp  # noqa: E402
from compiler.target import Target  # noqa: E402

HERE = Path(__file__).resolve().parent
D, F, T, H, HD = 1152, 4304, 729, 16, 72            # So400m (compiler/models/vit_config.py preset so400m)
# op output name -> (groups, m, k, n, k quantum, b dtype); the op's index from the trial's ops csv
MATMULS = {"qkv.xw": (1, T, D, 3 * D, 32, "fp8"), "scores": (H, T, HD, T, 2, "f16"),
           "attn": (H, T, T, HD, 2, "f16"), "proj.xw": (1, T, D, D, 32, "fp8"),
           "fc1.xw": (1, T, D, F, 32, "fp8"), "fc2.xw": (1, T, F, D, 32, "fp8")}


def block(d: int, g: int, q: int) -> int:
    return min(-(-(-(-d // q)) // g) * q, d)


def terms(t: Target, m: int, k: int, n: int, dtype: str, a_dtype: str = "f16") -> dict:
    """The estimate's terms for one m x k x n block (int cycles)."""
    d = t.amp_dtype(dtype, a_dtype)
    gi, go, macs = t.amp_in_group[d], t.amp_out_group[d], t.amp_macs_per_cycle[d]
    total = int(t.matmul_cycles(m, k, n, dtype, a_dtype))
    cast = 0 if d == "fp8" else int(amp.amp_output_cast_cycles(m, n, t.workers, t.vector_bytes_per_cycle))
    passes = -(-k // gi) * -(-n // go)
    core = gi * go // macs
    rows = int(amp.amp_worker_rows(m, t.workers).max())
    floor = m * k * n / macs
    padded = passes * core * m
    balanced = passes * core * rows * t.workers
    return dict(total=total, floor=round(floor), padding=padded - round(floor), imbalance=balanced - padded,
                overhead=total - cast - balanced, cast=cast, eff=round(floor / total, 3), passes=passes)


def layer_table(t: Target, label: str) -> list[str]:
    js = json.loads((HERE / "ops" / f"{label}.json").read_text())
    grids = dict(re.findall(r"op(\d+):(\S+)", js.get("candidate", "")))
    fp8 = "model.fp8_activations=true" in js.get("overrides", [])
    out = [f"### {label}", "", "| op | grid | tile block m,k,n | estimate | AMP floor | padding | row imbalance "
           "| pass overhead | output cast | floor / estimate |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    index = {row.split(",")[1]: row.split(",")[0] for row in (HERE / "ops" / f"{label}.csv").read_text().split()[1:]}
    for name, (G, M, K, N, qk, bd) in MATMULS.items():
        n = index.get(name)
        if n not in grids:
            continue
        lab = re.sub(r"[@~*].*", "", grids[n]).split("/")[0]
        dims = [int(x) for x in lab.split("x")]
        gg, gm, gn, gk = dims if len(dims) == 4 else [1, *dims]
        gb = -(-G // gg)
        mb, kb, nb = block(M, gm, 1), block(K, gk, qk), block(N, gn, 2)
        ad = "fp8" if fp8 and bd == "fp8" and name != "proj.xw" else "f16"   # proj: the f16 fallback
        tr = terms(t, mb, kb, nb, bd, ad)
        tr = {k: v * gb if k not in ("eff",) else v for k, v in tr.items()}
        out.append(f"| {name} | {grids[n]} | {gb}x {mb},{kb},{nb} | {tr['total']:,} | {tr['floor']:,} | "
                   f"{tr['padding']:,} | {tr['imbalance']:,} | {tr['overhead']:,} | {tr['cast']:,} | {tr['eff']} |")
    return out + [""]


def frontier(t: Target) -> list[str]:
    """qkv's k, n per tile (192 x 128, f16 activations x FP8 weights) at rows m: the estimate's
    efficiency, and the A bytes a tile receives for it at the same tile count (m·k·2)."""
    out = ["### frontier: qkv's 192 x 128 block at m rows", "",
           "| m | estimate | floor / estimate | without the cast | A bytes a tile receives |",
           "|---:|---:|---:|---:|---:|"]
    for m in (6, 12, 36, 81, 84, 122, 243, 729):
        tr = terms(t, m, 192, 128, "fp8")
        out.append(f"| {m} | {tr['total']:,} | {tr['eff']} | {round(tr['floor'] / (tr['total'] - tr['cast']), 3)} "
                   f"| {m * 192 * 2:,} |")
    return out + [""]


def main(labels: list[str]) -> None:
    t = Target.load("ipu21")
    labels = labels or sorted(p.stem for p in (HERE / "ops").glob("*.json"))
    lines = []
    for lb in labels:
        lines += layer_table(t, lb)
    print("\n".join(lines + frontier(t)))


if __name__ == "__main__":
    main(sys.argv[1:])

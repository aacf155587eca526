"""Lower bound on cycles per So400m encoder layer from the target figures alone.

    python experiments/roofline/roofline.py [target] [tokens] [width] [hidden] [heads]

compute   every MAC at the peak AMP rate of all tiles, FP16 for Q·Kᵀ and P·V; for the
          four weight matmuls (QKV, projection, fc1, fc2: FP8 weights, FP16 activations)
          two readings: `fp8` counts them at the FP8 rate (the issue's rough 72k), `target`
          at the rate target.matmul_cycles applies to FP16 x FP8 (the slower operand's)
          with FP16 activation blocks in the exchange term;
exchange  per matmul, the least any grid (gm·gn·gk <= tiles) must receive on its
          busiest tile at exchange_bytes_per_cycle: the activation block (FP8) plus,
          for a k-split, the partial sums it reduces (FP16); B is free only when the
          grid does not replicate it (gm = 1: weights pre-placed where used), else its
          block is received too (attention's K and V are activations and always move);
phases    one exchange phase (fixed cost) per matmul plus one per reduction, and a
          sync per superstep (exchange + compute per matmul, 2 more per k-split).
Softmax, LayerNorm, GELU and residual adds are left out (they only raise the bound).
"""
from __future__ import annotations

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.target import Target  # noqa: E402


def least_exchange(M, K, N, G, a_bytes, t: Target, b_bytes, b_moves):
    """Min over grids of the busiest tile's received bytes, and whether it reduces.
    A grid with gm > 1 replicates B's blocks gm times, so B must move (counted);
    with gm = 1 B may be pre-placed where it is used (weight-stationary, free)."""
    best = None
    T = t.tiles
    for gk in range(1, T + 1):
        kb = -(-K // gk)
        for gn in range(1, T // gk + 1):
            nb = -(-N // gn)
            for gm in sorted({1, T // (gk * gn)}):
                if gm < 1:
                    continue
                rows = -(-M * G // gm)
                a = rows * kb * a_bytes
                b = kb * nb * b_bytes if gm > 1 or b_moves else 0
                red = (gk - 1) * -(-rows // gk) * nb * 2
                v = a + b + red
                if best is None or v < best[0]:
                    best = (v, gk > 1)
    return best


def main(argv):
    t = Target.load(argv[0] if argv else "ipu21")
    T0, D, F, H = (int(x) for x in (argv[1:5] if len(argv) > 4 else (729, 1152, 4304, 16)))
    dh = D // H
    tiles = t.tiles
    mm = {  # name: (M, K, N, groups, a_bytes, rate dtype, weights move)
        "qkv": (T0, D, 3 * D, 1, 1, "fp8", False),
        "q.kT": (T0, dh, T0, H, 2, "f16", True),
        "p.v": (T0, T0, dh, H, 2, "f16", True),
        "proj": (T0, D, D, 1, 1, "fp8", False),
        "fc1": (T0, D, F, 1, 1, "fp8", False),
        "fc2": (T0, F, D, 1, 1, "fp8", False),
    }
    for reading in ("fp8", "target"):
        comp = exch = steps = 0
        rows = []
        for name, (M, K, N, G, ab, dt, bm) in mm.items():
            rate = t.amp_macs_per_cycle[dt]
            if reading == "target" and not bm:     # FP16 activations: FP16 rate, 2-byte blocks
                rate, ab = min(rate, t.amp_macs_per_cycle["f16"]), 2
            c = -(-(M * K * N * G) // (rate * tiles))
            v, red = least_exchange(M, K, N, G, ab, t, 2 if bm else 1, bm)
            x = -(-v // t.exchange_bytes_per_cycle) + t.exchange_phase_cycles * (2 if red else 1)
            s = 4 if red else 2
            comp, exch, steps = comp + c, exch + x, steps + s
            rows.append((name, c, x))
        sync = steps * t.sync_cycles
        total = comp + exch + sync
        print(f"\n### weight matmuls at the {reading} rate\n\n| op | compute | exchange |\n|---|---:|---:|")
        for name, c, x in rows:
            print(f"| {name} | {c} | {x} |")
        print(f"| **layer** | **{comp}** | **{exch}** (+ {sync} sync) |")
        print(f"\nbound per layer: {total} cycles; 1.5x bound: {int(1.5 * total)}")


if __name__ == "__main__":
    main(sys.argv[1:])

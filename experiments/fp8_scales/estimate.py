"""Cost-model estimate of FP8 activation scales computed on the device, per layer of
the So400m encoder (4 casts: LayerNorm 1 and 2 outputs [729, 1152], attention output
[729, 1152], GELU output [729, 4304]), with the target's own cost functions
(compiler/target.py), none of it built:

  on-device amax  per cast: a local max pass over each tile's share (a vector kernel
                  reading the f16 data), then a two-level max-reduce across the P
                  tiles holding the tensor (√P groups: exchange 4 B per tile to its
                  group root, reduce; the same across group roots), then a broadcast of
                  the scale (4 B, sent once): 3 exchange phases, 3 compute steps, a sync
                  after each, all on the critical path before the cast.
  delayed scaling the cast uses the amax of the previous run of the same cast (the
                  previous layer in a Repeat): the local max is fused into the cast (its
                  data is read anyway: the extra is the compare, charged here as one more
                  read pass), the 4-byte partials ride the next existing exchange phases
                  (bytes only) and the reduce joins an existing compute step (one vector
                  kernel per level).

    python experiments/fp8_scales/estimate.py [target]      (default ipu21)
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compiler.target import Target  # noqa: E402

CASTS = {"ln1": (729, 1152), "attn": (729, 1152), "ln2": (729, 1152), "gelu": (729, 4304)}


def on_device(t: Target, rows: int, cols: int, P: int) -> int:
    share = -(-rows * cols // P)
    local = t.vector_cycles(2 * share) + t.sync_cycles
    g = math.isqrt(P - 1) + 1                           # group size (√P, rounded up)
    level = t.exchange_cycles(np.array([4]), np.array([4 * g])) + t.sync_cycles + t.vector_cycles(4 * g) \
        + t.sync_cycles
    bcast = t.exchange_cycles(np.array([4]), np.array([4])) + t.sync_cycles
    return local + 2 * level + bcast


def delayed(t: Target, rows: int, cols: int, P: int) -> int:
    share = -(-rows * cols // P)
    g = math.isqrt(P - 1) + 1
    return -(-2 * share // t.vector_bytes_per_cycle) + 2 * (t.vector_cycles(4 * g) + math.ceil(4 * g / t.exchange_bytes_per_cycle))


def main(argv):
    t = Target.load(argv[0] if argv else "ipu21")
    P = t.tiles
    a = sum(on_device(t, r, c, P) for r, c in CASTS.values())
    d = sum(delayed(t, r, c, P) for r, c in CASTS.values())
    print(f"{t.tiles} tiles holding each cast's input: on-device amax {a:,} cycles per layer, "
          f"delayed scaling {d:,} cycles per layer; offline calibration 0")


if __name__ == "__main__":
    main(sys.argv[1:])

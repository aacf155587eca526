"""Where one group of the 27-layer spatial pipeline fits, and its cycles (policy.pipeline_fit's
view, compiler/spatial_tiles.py Fits: plan + expand of group k on a target of w tiles, batch 1,
the held-out photo).

    python experiments/throughput/group_tiles.py f16|fp8 G k:w [k:w ...]

One line per k:w: expand's exact cycles of group k's program on w tiles, or its rejection."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import model_phase, policy_of, target_of  # noqa: E402
from compiler.spatial import group_models  # noqa: E402
from compiler.spatial_tiles import Fits  # noqa: E402
from pipeline.config import compose  # noqa: E402


def args(doc: str, least: int) -> tuple[str, int, list]:
    """(activations, G, the other arguments) of `script f16|fp8 G ...`, or the usage and exit."""
    if len(sys.argv) < least or sys.argv[1] not in ("f16", "fp8"):
        print(doc)
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    return sys.argv[1], int(sys.argv[2]), sys.argv[3:]


def group_fits(act: str, G: int, extra=()) -> tuple[Fits, object]:
    """Fits of the 27-layer tower's G groups (batch 1, the held-out photo) and the chip."""
    cfg = compose(["model=vit", "target=ipu21", "+experiment=layers_27",
                   f"model.fp8_activations={'true' if act == 'fp8' else 'false'}", *extra])
    m, pol, t = model_phase(cfg), policy_of(cfg), target_of(cfg)
    return Fits(group_models(m, G, pol.deferred_norm), t, pol), t


if __name__ == "__main__":
    act, G, pairs = args(__doc__, 4)
    fits = group_fits(act, G)[0]
    for k, w in (tuple(map(int, a.split(":"))) for a in pairs):
        e = fits(k, w)[1]
        print(f"group {k} on {w} tiles:", e.rejection.message if e.rejection else f"{e.finalists[0].analysis['cycles']:,} cycles",
              flush=True)

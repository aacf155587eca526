"""The spatial pipeline lowered and run at full depth (issue #27; compiler/spatial.py).

    python experiments/throughput/spatial.py G N [f16|fp8] [key=value ...] >> rows.md

G groups of the 27 So400m layers (G divides 27) on ipu21's tiles (1472 // G each), N held-out
photos (run.py's inputs) through one simulator run of the lowered program: N + G - 1 pipeline
steps, every image's outputs held to its own reference, every group boundary read back
against that image's layer output, the machine's cycles against expand's and the cycle
oracle's. One markdown row: images/s over the run (fill and drain counted) and in the steady
state (one image a step), latency (G steps), min free bytes, validation, seconds."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler import spatial  # noqa: E402
from compiler.models import photos  # noqa: E402
from compiler.phases import model_phase, policy_of, reference_phase, target_of  # noqa: E402
from pipeline.config import compose  # noqa: E402


def row(G: int, N: int, act: str, extra: list) -> str:
    t0 = time.perf_counter()
    names = [photos.HELD_OUT[i % len(photos.HELD_OUT)] for i in range(N)]
    cfgs = [compose(["model=vit", "target=ipu21", "+experiment=layers_27", f"model.input={photos.PREFIX}{n}",
                     f"model.fp8_activations={'true' if act == 'fp8' else 'false'}", *extra]) for n in names]
    models = [model_phase(c) for c in cfgs]
    t, p = target_of(cfgs[0]), policy_of(cfgs[0])
    sp, e, pl, lo = spatial.compile_groups(models[0], t, p, G, N)
    cmd = f"`spatial.py {G} {N} {act}{' ' + ' '.join(extra) if extra else ''}`"
    rej = lo.rejection
    if rej:
        return f"| {G} | {N} | {act} | rejected: {rej.phase} ({rej.reason}): {rej.message} | | | | | {time.perf_counter() - t0:.0f} | {cmd} |"
    refs = [reference_phase(m) for m in models]
    image = spatial.image_name(models[0].graph)
    f = spatial.run_items(models[0], lo, G, [m.data[image] for m in models], refs, t)
    ok = "validated" if f["validated"] else "FAILED"
    expand = e.finalists[0].analysis["cycles"]
    agree = "=" if f["cycles"] == f["oracle_cycles"] == expand else f"oracle {f['oracle_cycles']}, expand {expand}"
    return (f"| {G} | {N} | {act} | {f['run_images_per_s']:.1f} | {f['images_per_s']:.1f} | {f['latency_ms']:.2f} | "
            f"{pl.placement.min_free_bytes} | {ok}: {f['ops_checked']:,} op read-backs, {f['exchanges_checked']:,} exchanges, "
            f"{f['boundaries_checked']} boundaries, outputs max err "
            f"{max(f['errors']):.3g}; cycles {f['cycles']} {agree} | {time.perf_counter() - t0:.0f} | {cmd} |")

if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) < 2:
        raise SystemExit(__doc__)
    act = a[2] if len(a) > 2 and a[2] in ("f16", "fp8") else "f16"
    print(row(int(a[0]), int(a[1]), act, [x for x in a[2:] if "=" in x]), flush=True)

"""The model check on held-out real photos (issue #23's acceptance: FP16 activations <= 0.2 %
rms against the independent model on at least 5 held-out photos, at 4 and 27 layers).

    python experiments/timm_check/held_out.py [--layers 4,27] [--photos 5]

Runs the model and reference phases only (host: no compile, no simulator; the device is held
to that reference by the per-op, per-layer and end-to-end checks of every trial) for the
So400m tower, seeded FP8 weights, FP16 activations, each of the first N photos of
photos.HELD_OUT as the input; prints, per output, the rms relative error and cosine of the
graph's f16 evaluation against compiler/timm_model.py (model_check.figures) and whether the
model check passes."""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.models import photos  # noqa: E402
from compiler.phases import model_phase, reference_phase  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="4,27")
    ap.add_argument("--photos", type=int, default=5)
    a = ap.parse_args()
    print("| layers | photo | embedding rms / cosine | features rms / cosine | model check | seconds |")
    print("|---:|---|---:|---:|---|---:|")
    worst = {}
    for L in (int(x) for x in a.layers.split(",")):
        for name in photos.HELD_OUT[:a.photos]:
            t0 = time.perf_counter()
            m = model_phase(dict(model=dict(name="vit", preset="so400m", layers=L, input=photos.PREFIX + name)))
            ref = reference_phase(m)
            f = ref.model_figures
            from compiler.model_check import check
            ok = check(m.graph, f, ref.model_weights).get("ok")
            cell = lambda n: f"{100 * f[n]['rms_rel_error']:.3f} % / {f[n]['cosine']:.6f}"
            print(f"| {L} | {name} | {cell('embedding')} | {cell('features')} | {'pass' if ok else 'FAIL'} | "
                  f"{time.perf_counter() - t0:.0f} |", flush=True)
            worst[L] = max(worst.get(L, 0), *(f[n]["rms_rel_error"] for n in f))
    for L, w in worst.items():
        print(f"\n{L} layers: worst rms relative error {100 * w:.3f} % over {a.photos} held-out photos (acceptance 0.2 %)")


if __name__ == "__main__":
    main()

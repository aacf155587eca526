"""Which cast's FP8 rounding the outputs' error comes from, on held-out photos.

    python experiments/fp8_scales/per_cast.py [--layers 4] [--calibration 2] [--photos moon,clock,rocket]

The So400m tower (seeded weights, seed 0; model.fp8_activations=true, model.fp8_fallback=false,
`--calibration` CALIBRATION photos) is built once; per held-out photo, the rms relative error of
the embedding and the features against FP16 activations with all four casts, and with each
cast (and two pairs) kept in f16 (calibrate.keep_in_f16: the cast taken out, its matmul reading
the f16 input). results-per-cast-4.txt: the attention output's cast is most of the error."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compiler import compare, reference  # noqa: E402
from compiler.models import vit, vit_config  # noqa: E402
from compiler.models.attention import padded  # noqa: E402
from compiler.models.calibrate import keep_in_f16, photo_pixels, tower_input  # noqa: E402
from compiler.models.image import MEAN, STD  # noqa: E402


def arg(argv, name, default):
    return argv[argv.index(name) + 1] if name in argv else default


def main(argv):
    spec = dict(name="vit", preset="so400m", scope="tower", layers=int(arg(argv, "--layers", 4)),
                fp8_activations=True, fp8_fallback=False, calibration=int(arg(argv, "--calibration", 2)))
    g, data = vit.build(spec)
    d = vit_config.VitConfig(**spec).dims()
    print("| photo | casts kept in f16 | embedding | features |\n|---|---|---:|---:|")
    for n in arg(argv, "--photos", "moon,clock,rocket").split(","):
        run = {**data, **tower_input([photo_pixels(n, d["image"], d.get("crop_pct", 1.0), MEAN, STD)], d,
                                     padded(d["tokens"]))}
        f16 = compare.fp16_activations(g, run)
        for drop in [(), ("ln1",), ("attn",), ("ln2",), ("gelu",), ("ln1", "ln2"), ("attn", "gelu")]:
            out = reference.run(keep_in_f16(g, list(drop)), run)
            e = [compare.rms_rel_error(g, {k: out[k]}, {k: f16[k]}) for k in ("embedding", "features")]
            print(f"| {n} | {', '.join(drop) or 'none'} | {e[0]:.3%} | {e[1]:.3%} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

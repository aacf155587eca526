"""FP8 activation scales: calibrated to the amax and to the least error (per layer, from
seeded calibration inputs: model.fp8_scales=calibrated, least_error) vs static bounds (per
layer, and the one bound for all layers before), as rms relative error of the outputs
against the same model with FP16 activations (same weights, same input).

    python experiments/fp8_scales/measure.py [--layers 4] [--scope tower] [--headroom 1,2,4]
                                             [--calibration 1] [--own] [--seeds 0,1,...]
                                             [--only least,calibrated]   (and always bound, per layer)
    python experiments/fp8_scales/measure.py --fixture     (the tiny timm towers, against timm)

Each variant's outputs are the model's numpy reference (the graph's semantics, FP8
casts included, what the simulator is validated against op by op and end to end);
the trial's input is the seeded image (of each seed: its weights and image), the
calibration inputs other seeded images. Prints one line per variant and seed: rms rel
error of the embedding and of the features (real rows), the host seconds of build
(incl. calibration) and reference; with several seeds, each variant paired with the
static per-layer bounds seed by seed."""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compiler import reference  # noqa: E402
from compiler.models import vit, vit_config  # noqa: E402
from compiler.compare import real_rows  # noqa: E402


# the calibration these figures were measured with: one seeded noise image, no f16 fallback (the
# defaults before issue #23 C; held_out.py measures today's defaults on held-out photos)
NOISE = dict(fp8_calibration="seeded", calibration=1, fp8_fallback=False)


def arg(argv, name, default):
    return argv[argv.index(name) + 1] if name in argv else default


def one_bound(g, data, spec):
    """Today's static bounds, one scale for all layers: the largest per-layer bound."""
    for n, op in enumerate(g.ops):
        if op.kind == "cast":
            s = max(op.attr("scale"))
            g.ops[n] = dataclasses.replace(op, attrs=tuple(sorted({**dict(op.attrs), "scale": s}.items())))
            y = op.outputs[0]
            g.tensors[y] = dataclasses.replace(g.tensors[y], scale=s)
    return g


def own_amax(g, data, spec):
    """What an on-device amax (exact, headroom 1) would give: calibration on the trial's
    own input. A measurement only: no trial may look at its input this way."""
    from compiler.models.calibrate import calibrate
    inp = {n: data[n] for n in ("pixels", "x") if n in data and g.tensors[n].kind == "input"}
    calibrate(g, data, [inp], 1.0)
    return g


def least_error_above_bounds(g, data, spec):
    """least_error with the static bounds as the floor instead of headroom × the
    calibration amax: clips only where the bounds would (never)."""
    from compiler.models.calibrate import least_error_scales
    from compiler.models.config import model_config
    from compiler.models.attention import padded
    c = model_config(vit_config.VitConfig, spec)
    d = c.dims()
    least_error_scales(g, data, vit.calibration_inputs(c, d, padded(d["tokens"]), c.batch if c.tower else 1), None)
    return g


def outputs(spec, post=None):
    t0 = time.perf_counter()
    g, data = vit.build(spec)
    if post:
        g = post(g, data, spec)
    t1 = time.perf_counter()
    out = reference.run(g, data)
    keep = {n: real_rows(g, n) for n in out}
    return {n: v[keep[n]].astype(np.float64) for n, v in out.items()}, t1 - t0, time.perf_counter() - t1


def rms(got, ref):
    return float(np.sqrt(((got - ref) ** 2).sum() / (ref ** 2).sum()))


def fixture(argv):
    """The two tiny towers of the timm fixture (tests/fixtures/timm): each variant's
    reference against timm's outputs on the same FP8-rounded weights (FP32 activations)."""
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tests"))
    from test_tower_timm import FIX, TOWERS
    fx = np.load(FIX / "outputs.npz")
    for tower, spec in TOWERS.items():
        spec = dict(spec, **NOISE, weights=str(FIX / f"{tower}.safetensors"), input=str(FIX / "image.png"))
        T0 = fx[f"{tower}/fp32/features"].shape[0]
        first = int(spec["pool"] == "token")
        for label, extra, post in [("FP16 activations", {}, None)] + VARIANTS:
            g, data = vit.build({**spec, **extra, "fp8_activations": bool(extra)})
            if post:
                g = post(g, data, spec)
            out = reference.run(g, data)
            errs = ", ".join(f"{n} {rms(out[n].astype(np.float64)[:T0 + first][:len(fx[f'{tower}/fp8/{n}'])], fx[f'{tower}/fp8/{n}'].astype(np.float64)):.5f}"
                             for n in sorted(out))
            print(f"| {tower} | {label} | {errs} |", flush=True)


VARIANTS = []


def main(argv):
    if "--fixture" in argv:
        VARIANTS.extend([("bound, one scale for all layers (before)", dict(fp8_scales="bound"), one_bound),
                         ("bound, per layer", dict(fp8_scales="bound"), None),
                         ("calibrated (centred), per layer, headroom 2", dict(fp8_scales="calibrated"), None),
                         ("least error (not centred), headroom 2", dict(fp8_centering="none"), None),
                         ("least error (centred), headroom 2", dict(fp8_scales="least_error"), None),
                         ("own input amax, headroom 1", dict(fp8_scales="bound"), own_amax),
                         ("today's default: least error (centred), 6 calibration photos, f16 fallback",
                          dict(fp8_calibration="photos", calibration=6, fp8_fallback=True), None)])
        return fixture(argv)
    layers = int(arg(argv, "--layers", 4))
    heads = [float(h) for h in arg(argv, "--headroom", "2").split(",")]
    cal = int(arg(argv, "--calibration", 1))
    seeds = [int(v) for v in arg(argv, "--seeds", arg(argv, "--seed", "0")).split(",")]
    variants = [("bound, one scale for all layers (before)", dict(fp8_scales="bound"), one_bound),
                ("bound, per layer", dict(fp8_scales="bound"), None)]
    variants += [(f"calibrated (centred), per layer, headroom {h:g}, {cal} input(s)",
                  dict(fp8_scales="calibrated", fp8_headroom=h, calibration=cal), None) for h in heads]
    if "--own" in argv:
        variants.append(("on-device amax (estimate: the trial's own input, headroom 1)", dict(fp8_scales="bound"),
                         own_amax))
    variants += [(f"least error ({'centred' if centre != 'none' else 'not centred'}), headroom {h:g}, {cal} input(s)",
                  dict(fp8_scales="least_error", fp8_headroom=h, calibration=cal, fp8_centering=centre), None)
                 for centre in ("norms", "none") for h in heads]
    variants.append((f"least error above the static bounds, {cal} input(s)",
                     dict(fp8_scales="bound", calibration=cal), least_error_above_bounds))
    if "--only" in argv:                  # labels starting with any of these (comma-separated)
        keep = tuple(arg(argv, "--only", "").split(","))
        variants = [v for v in variants if v[0].startswith(keep) or v[0] == "bound, per layer"]
    errs = {}                                        # (variant, seed) -> {output: rms}
    for seed in seeds:
        spec = dict(name="vit", preset="so400m", scope=arg(argv, "--scope", "tower"), layers=layers, seed=seed, **NOISE)
        ref, tb, tr = outputs(spec)
        print(f"so400m {spec['scope']}, {layers} layers, seed {seed}; FP16 activations: build {tb:.1f} s, "
              f"reference {tr:.1f} s", flush=True)
        for label, extra, post in variants:
            got, tb, tr = outputs({**spec, "fp8_activations": True, **extra}, post)
            errs[label, seed] = {n: rms(got[n], ref[n]) for n in sorted(ref)}
            errs[label, seed]["all outputs"] = rms(*(np.concatenate([v[n].ravel() for n in sorted(ref)])
                                                     for v in (got, ref)))   # the run's metric
            text = ", ".join(f"{n} {e:.5f}" for n, e in errs[label, seed].items())
            print(f"| {label} | {text} | build {tb:.1f} s, reference {tr:.1f} s |", flush=True)
    if len(seeds) > 1:
        paired(errs, [v[0] for v in variants], seeds, "bound, per layer")


def paired(errs, labels, seeds, base):
    """Each variant against `base` seed by seed: the mean of (error - base's) / base's,
    its standard error over the seeds, and on how many seeds the variant's error is lower."""
    print(f"\npaired over seeds {','.join(map(str, seeds))}: (variant - {base}) / {base}")
    print("| variant | output | mean error | mean relative difference ± s.e. | lower on |")
    print("|---|---|---:|---:|---:|")
    for label in labels:
        for n in errs[label, seeds[0]]:
            e = np.array([errs[label, s][n] for s in seeds])
            d = e / np.array([errs[base, s][n] for s in seeds]) - 1
            print(f"| {label} | {n} | {e.mean():.3%} | {d.mean():+.2%} ± {d.std(ddof=1) / np.sqrt(len(d)):.2%} "
                  f"| {int((d < 0).sum())}/{len(d)} |")

if __name__ == "__main__":
    main(sys.argv[1:])

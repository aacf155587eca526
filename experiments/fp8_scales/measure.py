"""FP8 activation scales: calibrated (per layer, from seeded calibration inputs) vs
static bounds (per layer, and today's one bound for all layers), as rms relative error
of the outputs against the same model with FP16 activations (same weights, same input).

    python experiments/fp8_scales/measure.py [--layers 4] [--scope tower] [--headroom 1,2,4]
                                             [--calibration 1] [--own] [--least-error] [--seeds 0,1,...]
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
from compiler.models import vit  # noqa: E402
from compiler.models.gemm import FP8, FP8_MAX  # noqa: E402
from compiler.compare import real_rows  # noqa: E402


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


def least_error(g, data, spec, steps=16):
    """Offline calibration to the least error instead of the amax: per cast and per layer,
    of `steps` scales spread over one binade above the calibration image's amax / 448
    (e4m3's relative grid repeats every binade), the one whose rounding of that input errs
    least (rms), the casts of later layers seeing the chosen ones' outputs. The model's
    own calibration image (model.calibration = 1), never the trial's."""
    from compiler.models.calibrate import _with_scale
    from compiler.models.config import model_config
    from compiler.models.attention import padded
    c = model_config(vit.VitConfig, spec)
    d = c.dims()
    (inputs,) = vit.calibration_inputs(c, d, padded(d["tokens"]), c.batch if c.tower else 1)
    L = g.repeat.count
    chosen = {}

    def pick(n, op, i, env):
        if op.kind != "cast":
            return op
        x = np.asarray(env[op.inputs[0]], np.float32)
        base = float(np.abs(x).max()) / FP8_MAX or 1.0
        err = [rounding_error(x, base * 2 ** (j / steps)) for j in range(steps)]
        chosen.setdefault(n, np.zeros(L))[i] = s = base * 2 ** (int(np.argmin(err)) / steps)
        return dataclasses.replace(op, attrs=_with_scale(op, s))

    reference.evaluate(g, {**data, **inputs}, rewrite=pick)
    first, stop = g.body()
    for n, a in chosen.items():
        scale = tuple(float(v) for v in a) if first <= n < stop else float(a.max())
        g.ops[n] = dataclasses.replace(g.ops[n], attrs=_with_scale(g.ops[n], scale))
        y = g.ops[n].outputs[0]
        g.tensors[y] = dataclasses.replace(g.tensors[y], scale=scale)
    return g


def rounding_error(x, scale):
    q = np.clip(x / scale, -FP8_MAX, FP8_MAX).astype(FP8).astype(np.float32) * np.float32(scale)
    return float(((q - x) ** 2).sum())


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
        spec = dict(spec, weights=str(FIX / f"{tower}.safetensors"), input=str(FIX / "image.png"))
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
                         ("calibrated, per layer, headroom 2", dict(fp8_scales="calibrated"), None),
                         ("own input amax, headroom 1", dict(fp8_scales="bound"), own_amax)])
        return fixture(argv)
    layers = int(arg(argv, "--layers", 4))
    heads = [float(h) for h in arg(argv, "--headroom", "2").split(",")]
    cal = int(arg(argv, "--calibration", 1))
    seeds = [int(v) for v in arg(argv, "--seeds", arg(argv, "--seed", "0")).split(",")]
    variants = [("bound, one scale for all layers (before)", dict(fp8_scales="bound"), one_bound),
                ("bound, per layer", dict(fp8_scales="bound"), None)]
    variants += [(f"calibrated, per layer, headroom {h:g}, {cal} input(s)",
                  dict(fp8_scales="calibrated", fp8_headroom=h, calibration=cal), None) for h in heads]
    if "--own" in argv:
        variants.append(("on-device amax (estimate: the trial's own input, headroom 1)", dict(fp8_scales="bound"),
                         own_amax))
    if "--least-error" in argv:
        variants.append(("calibrated to the least error (16 scales per binade)", dict(fp8_scales="bound"),
                         least_error))
    errs = {}                                        # (variant, seed) -> {output: rms}
    for seed in seeds:
        spec = dict(name="vit", preset="so400m", scope=arg(argv, "--scope", "tower"), layers=layers, seed=seed)
        ref, tb, tr = outputs(spec)
        print(f"so400m {spec['scope']}, {layers} layers, seed {seed}; FP16 activations: build {tb:.1f} s, "
              f"reference {tr:.1f} s", flush=True)
        for label, extra, post in variants:
            got, tb, tr = outputs({**spec, "fp8_activations": True, **extra}, post)
            errs[label, seed] = {n: rms(got[n], ref[n]) for n in sorted(ref)}
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

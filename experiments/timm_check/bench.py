"""Full-size So400m tower against timm (or, without torch/timm, the independent
numpy re-implementation numpy_timm.py): Tessera's embedding vs the float32 weights and
vs Tessera's own FP8-rounded weights: rms relative error, cosine, max abs.

    python experiments/timm_check/bench.py [--layers 4] [--sim] [--numpy]

Weights: seeded under timm's names (compiler.models.vit_weights.seeded_weights: norms 1 + 0.1·N,
biases 0.1·N, matrices N(0, 1/fan_in)), saved to a temporary .safetensors and imported
through model.weights like a user's checkpoint; the image is the seeded one. Tessera's
side is the model's numpy reference (the graph's semantics with FP16 activations, what
the simulator is validated against within run.tolerance), or with --sim the simulator's
own output from an ipu21 compile (minutes)."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import numpy_timm  # noqa: E402
from make_fixture import fp8_rounded  # noqa: E402

from compiler.models import vit, vit_config, vit_weights  # noqa: E402


def figures(got, ref) -> str:
    got, ref = got.ravel().astype(np.float64), ref.ravel().astype(np.float64)
    rms = np.sqrt(((got - ref) ** 2).mean() / (ref ** 2).mean())
    cos = got @ ref / np.linalg.norm(got) / np.linalg.norm(ref)
    return f"rms rel {rms:.5f}, cosine {cos:.6f}, max abs {np.abs(got - ref).max():.4g}"


def timm_forward(sd: dict, img: np.ndarray, layers: int):
    """timm's own So400m tower (depth `layers`, no classifier) on weights `sd`, float64;
    None when torch/timm are not installed."""
    try:
        import timm
        import torch
    except ImportError:
        return None
    m = timm.create_model("vit_so400m_patch14_siglip_384", pretrained=False, depth=layers, num_classes=0)
    m.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in sd.items()}, strict=True)
    m = m.double().eval()
    with torch.no_grad():
        return m(torch.from_numpy(img[None])).numpy()[0], f"timm {timm.__version__}"


def main(argv):
    layers = int(argv[argv.index("--layers") + 1]) if "--layers" in argv else 4
    spec = dict(name="vit", preset="so400m", scope="tower", layers=layers, gelu="erf")
    c = vit_config.VitConfig(**spec)
    d = c.dims()
    shapes = vit_weights.block_shapes(layers, d["width"], d["hidden"]) | vit_weights.tower_shapes(d, c.classes)
    sd = vit_weights.seeded_weights(np.random.default_rng(7), 0, 0, 0, shapes).state_dict()
    with tempfile.TemporaryDirectory() as tmp:
        from safetensors.numpy import save_file
        path = Path(tmp) / "so400m.safetensors"
        save_file(sd, str(path))
        t0 = time.time()
        cfg = dict(spec, weights=str(path))
        g, data = vit.build(cfg)
        pixels = data["pixels"][:d["tokens"]].astype(np.float64)      # the patch rows Tessera sends
        if "--sim" in argv:
            import yaml
            from compiler import sim
            from compiler.phases import compile_trial
            target = yaml.safe_load((ROOT / "conf" / "target" / "ipu21.yaml").read_text())
            r = compile_trial(dict(model=cfg, target=target, policy={}))
            prog, m = r["lower"].program, r["model"]
            out = sim.run(prog, {k: np.ascontiguousarray(m.data[k]).view(np.uint8).ravel()
                                 for k in prog.in_streams}).outputs
            emb = out["embedding"].view(np.float16).astype(np.float64)
            side = f"simulator ({r['run'].cycles} cycles, validated {r['run'].validated})"
        else:
            from compiler.phases import model_phase, reference_phase
            emb = reference_phase(model_phase(dict(model=cfg))).outputs["embedding"].astype(np.float64)
            side = "Tessera reference (FP16 activations)"
        fp8 = fp8_rounded(dict(tessera=spec), path, sd)
    # the image as the numpy re-implementation's conv sees it: un-patch Tessera's rows
    P, n = d["patch"], d["image"] // d["patch"]
    img = np.zeros((3, d["image"], d["image"]))
    img[:, :n * P, :n * P] = pixels.reshape(n, n, 3, P, P).transpose(2, 0, 3, 1, 4).reshape(3, n * P, n * P)
    H = d["heads"]
    got = None if "--numpy" in argv else timm_forward(sd, img, layers)
    if got is not None:
        (full, who), (same, _) = got, timm_forward(fp8, img, layers)
    else:
        full = numpy_timm.forward(sd, img, H, layers, "map")["embedding"]
        same = numpy_timm.forward(fp8, img, H, layers, "map")["embedding"]
        who = "numpy_timm"
    print(f"So400m tower, {layers} layers, {side}, {time.time() - t0:.0f} s; reference: {who}")
    print(f"  vs the same FP8-rounded weights: {figures(emb, same)}")
    print(f"  vs float32 weights:              {figures(emb, full)}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Every phase result of ten tiny-target trials, hashed: the proof a refactor is a pure move.

    python experiments/tidy/snapshot.py > before.json      # on the old commit
    python experiments/tidy/snapshot.py > after.json       # on the new one
    diff before.json after.json                             # empty: every byte the same

Each trial (gemm f16 and ragged fp8, an mlp with a Repeat, attention materialized and flash,
the ViT encoder with and without FP8 activations, the SigLIP and b16 towers, an FP8 tower)
runs every phase in-process (compiler.phases.compile_trial, the serial mapper); each phase's
result is encoded with the artifact codec (pipeline/codec.py: the bytes `result.npz` would
hold; the report's summary for report) and its sha256 printed, with the run's cycles and
whether it validated. About 25 s on one idle core."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from compiler.phases import compile_trial  # noqa: E402
from pipeline.codec import dumps  # noqa: E402

TRIALS = {
    "gemm": dict(name="gemm", m=32, k=64, n=64, dtype="f16", seed=0),
    "gemm-fp8-ragged": dict(name="gemm", m=19, k=72, n=44, dtype="fp8", seed=1),
    "mlp-b2-repeat3": dict(name="mlp", tokens=12, batch=2, width=16, hidden=32, repeat=3),
    "attention": dict(name="attention", tokens=16, heads=2, head_dim=16),
    "flash-attention": dict(name="flash_attention", tokens=15, heads=2, head_dim=16, block=4),
    "vit": dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=16, layers=2),
    "vit-fp8-act": dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=2,
                        fp8_activations=True),
    "siglip-tower": dict(name="vit", preset="custom", scope="tower", width=64, hidden=172, heads=2, image=56,
                         patch=14, layers=2, gelu="erf"),
    "b16-tower": dict(name="vit", preset="custom", scope="tower", width=64, hidden=256, heads=2, image=64,
                      patch=16, layers=2, pool="token", classes=12, gelu="erf"),
    "tower-fp8": dict(name="vit", preset="custom", scope="tower", width=32, hidden=64, heads=2, image=28,
                      patch=14, layers=2, fp8_activations=True),
}


def main() -> int:
    target = yaml.safe_load((REPO / "conf" / "target" / "tiny.yaml").read_text())
    out = {}
    for name, model in TRIALS.items():
        r = compile_trial(dict(model=model, target=target, policy={}))
        for phase, res in r.items():
            out[f"{name}/{phase}"] = hashlib.sha256(dumps(res.summary if phase == "report" else res)).hexdigest()[:16]
        out[f"{name}/cycles"] = getattr(r["run"], "cycles", None)
        out[f"{name}/validated"] = bool(getattr(r["run"], "validated", False))
        print(name, out[f"{name}/cycles"], out[f"{name}/validated"], file=sys.stderr, flush=True)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

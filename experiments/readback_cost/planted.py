"""Planted bugs against the two validations, on the CI-sized ViT (tests/test_readback.py's:
custom 32 wide, MLP 64, 2 heads, 15 tokens, 2 layers; tiny target): does the end-to-end
max-abs check alone catch it, and what does the op-by-op read-back report?

    python experiments/readback_cost/planted.py > experiments/readback_cost/planted.md

Each bug zeroes part of the last layer's member of a parameter in the host stream (what the
machine receives); the checks hold the device to the model's data."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import compile_trial, target_of  # noqa: E402
from compiler.run import run  # noqa: E402
from pipeline.config import compose  # noqa: E402

VIT = ["model=vit", "target=tiny", "model.preset=custom", "model.scope=blocks", "model.width=32", "model.hidden=64", "model.heads=2",
       "model.tokens=15", "model.layers=2"]
BUGS = [("fc2 bias dropped", "mlp.fc2.bias", np.s_[...]), ("proj bias dropped", "attn.proj.bias", np.s_[...]),
        ("fc1 bias dropped", "mlp.fc1.bias", np.s_[...]), ("qkv bias dropped", "attn.qkv.bias", np.s_[...]),
        ("norm2 beta dropped", "norm2.bias", np.s_[...]), ("2 of 64 fc2 k-rows zeroed", "mlp.fc2.weight", np.s_[10:12]),
        ("1 of 32 fc2 output columns zeroed", "mlp.fc2.weight", np.s_[:, 5])]


def main():
    print("| mode | bug | end-to-end error / tolerance | caught end to end alone | first failed op (iteration, tile) "
          "| its error / bound |")
    print("|---|---|---|---|---|---|")
    for mode, extra in (("FP16 act.", []), ("FP8 act.", ["model.fp8_activations=true"])):
        cfg = compose(VIT + extra)
        r = compile_trial(cfg)
        for label, name, idx in BUGS:
            a = np.array(r["model"].data[name])
            a[-1][idx] = 0
            m = run(r["lower"], r["model"], target_of(cfg), "all", {name: a}).metrics()
            f = m["first_failed_op"]
            print(f"| {mode} | {label} | {m['max_abs_error']:.3g} / {m['tolerance']:.3g} | "
                  f"{'yes' if m['max_abs_error'] > m['tolerance'] else '**no**'} | `{f['op']}` ({f['iteration']}, "
                  f"{f['tile']}) | {f['error']:.3g} / {f['bound']:.3g} |", flush=True)


if __name__ == "__main__":
    main()

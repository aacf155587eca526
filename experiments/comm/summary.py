"""The before / after table of policy.operand_relay from ops/<label>.json (ops_trial.py):
cycles per layer, whole-program cycles, validation, and the ratio to the compute floor of the
trial's dtypes (experiments/roofline/bound.json per_op.<mode>.layer.compute).

    python experiments/comm/summary.py"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRIALS = (("f16", 4, "So400m, 4 layers, FP16 activations (default)"), ("f16", 27, "So400m, 27 layers, FP16 activations"),
          ("fp8", 4, "So400m, 4 layers, FP8 activations"), ("fp8", 27, "So400m, 27 layers, FP8 activations"),
          ("b16-f16", 12, "b16, 12 layers, FP16 activations"))


def main() -> None:
    bound = json.loads((HERE.parent / "roofline" / "bound.json").read_text())["per_op"]
    print("| trial | cycles / layer before | after (relay) | after / before | × compute floor before → after "
          "| whole program before → after | validated |\n|---|---:|---:|---:|---:|---:|---|")
    for mode, L, title in TRIALS:
        b, a = (HERE / "ops" / f"{mode}-{L}{s}.json" for s in ("", "r"))
        if not (b.exists() and a.exists()):
            continue
        b, a = (json.loads(p.read_text())["run"] for p in (b, a))
        floor = bound.get(mode, {}).get("layer", {}).get("compute")
        x = (f"{b['cycles_per_layer'] / floor:.2f} → {a['cycles_per_layer'] / floor:.2f}" if floor else "-")
        print(f"| {title} | {b['cycles_per_layer']:,} | {a['cycles_per_layer']:,} | "
              f"{a['cycles_per_layer'] / b['cycles_per_layer']:.3f} | {x} | {b['cycles']:,} → {a['cycles']:,} | "
              f"{b['validated']} / {a['validated']} |")


if __name__ == "__main__":
    main()

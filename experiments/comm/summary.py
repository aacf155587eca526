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
        if not a.exists():
            continue
        a = json.loads(a.read_text())["run"]
        floor = bound.get(mode, {}).get("layer", {}).get("compute")
        if not b.exists():                 # the start commit's trial not run (time): after only
            x = f"- → {a['cycles_per_layer'] / floor:.2f}" if floor else "-"
            print(f"| {title} | - | {a['cycles_per_layer']:,} | - | {x} | - → {a['cycles']:,} | - / {a['validated']} |")
            continue
        b = json.loads(b.read_text())["run"]
        x = (f"{b['cycles_per_layer'] / floor:.2f} → {a['cycles_per_layer'] / floor:.2f}" if floor else "-")
        print(f"| {title} | {b['cycles_per_layer']:,} | {a['cycles_per_layer']:,} | "
              f"{a['cycles_per_layer'] / b['cycles_per_layer']:.3f} | {x} | {b['cycles']:,} → {a['cycles']:,} | "
              f"{b['validated']} / {a['validated']} |")

if __name__ == "__main__":
    main()

"""The seed workloads on ipu21 through every phase in-process (as `python -m
pipeline.trial`), with host seconds and peak RSS per phase.

    python experiments/workloads/run.py > experiments/workloads/results.md
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from pipeline.config import compose  # noqa: E402
from pipeline.trial import trial  # noqa: E402

WORKLOADS = {
    "MLP B1 (fp8 weights)": ["model=mlp"],
    "MLP B2 Repeat 3": ["model=mlp", "model.batch=2", "model.repeat=3"],
    "attention B1": ["model=attention"],
    "FlashAttention B1": ["model=flash_attention"],
    "ViT so400m FP8, 4 layers": ["model=vit", "model.layers=4"],
    "ViT so400m FP8, 4 layers, FP8 activations": ["model=vit", "model.layers=4", "model.fp8_activations=true"],
}


def main():
    print("| workload | status | cycles | cycles / Repeat iteration | ms @ 1.5 GHz | max abs error / tolerance "
          "| host s per phase (model, plan, expand, place, schedule, lower, run) | peak RSS MiB (max phase) |")
    print("|---|---|---:|---:|---:|---|---|---:|")
    for name, ov in WORKLOADS.items():
        cfg = compose(["target=ipu21", "executor=sync", *ov])
        with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as d:
            cfg["store"] = str(Path(d) / "store")          # a fresh store: nothing cached
            s = trial(cfg, Path(d))
        r, h = s["run"], s["host"]
        phases = ["model", "plan", "expand", "place", "schedule", "lower", "run"]
        secs = ", ".join(f"{h[p]['elapsed_s']:.1f}" for p in phases)
        rss = max(h[p].get("peak_rss_mib", 0) for p in phases)
        err = f"{r['max_abs_error']:.4g} / {r['tolerance']:.4g}" if "cycles" in r else "-"
        print(f"| {name} | {s['status']} | {r.get('cycles', '-')} | {r.get('cycles_per_layer', '-')} | "
              f"{r.get('ms', '-')} | {err} | {secs} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()

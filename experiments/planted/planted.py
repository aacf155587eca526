"""The planted-bug table (issue #23): every kind in plants.KINDS planted in the first, a
middle and the last layer (where it applies) of a 3-layer tiny-target tower, with FP16 and
with FP8 activations, run under a `policy.check` mode (default: the project's default):
caught or not, by which checks, the first op and tile named (the earliest iteration's).

    python experiments/planted/planted.py [CHECK] [--full] [--kinds SUBSTRING ...] > experiments/planted/table-CHECK.md

--full: the default trial's So400m tower (4 layers, ipu21), the device kinds in the middle
layer only (a few minutes per mode to compile; the model kinds are sized for the custom tower).

The model-definition kinds rebuild the trial with the graph builder patched (plants.py):
only the independent timm-model check can catch them."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import plants  # noqa: E402
from compiler.policy import Policy  # noqa: E402


def fmt(v):
    return "-" if v is None else (f"{v:.3g}" if isinstance(v, float) else str(v))


FULL = dict(name="vit", preset="so400m", layers=4)      # --full: the default trial's tower, ipu21


def rows(check: str, kinds=None, full=False):
    target = yaml.safe_load((ROOT / "conf" / "target" / f"{'ipu21' if full else 'tiny'}.yaml").read_text())
    for mode, fp8 in (("FP16", False), ("FP8", True)):
        r = plants.trial(target, fp8, model=FULL if full else None, check=check)
        L = r["model"].graph.repeat.count
        for kind in plants.KINDS:
            if (kind.fp8_only and not fp8) or (kinds and not any(k in kind.name for k in kinds)):
                continue
            if full and kind.where == "model":       # their plants read the custom tower's sizes
                continue
            layers = ((L // 2,) if full else (0, L // 2, L - 1)) if kind.per_layer else (None,)
            for layer in layers:
                t0 = time.perf_counter()
                o = plants.outcome(r, kind, 1 if layer is None else layer)
                yield mode, kind, layer, o, time.perf_counter() - t0


def main(argv):
    full = "--full" in argv
    argv = [a for a in argv if a != "--full"]
    check = argv[0] if argv and not argv[0].startswith("--") else Policy().check
    kinds = argv[argv.index("--kinds") + 1:] if "--kinds" in argv else None
    print(f"policy.check={check}; " + ("ipu21, So400m tower, 4 layers (the middle layer only)\n" if full else
          f"tiny target; tower {plants.TOWER['width']} wide, {plants.TOWER['layers']} layers\n"))
    print("| mode | kind | where | layer | caught | by | first named op (iteration, tile) | its error / bound |")
    print("|---|---|---|---|---|---|---|---|")
    missed = 0
    for mode, kind, layer, o, secs in rows(check, kinds, full):
        where = "model" if kind.where == "model" else ("program" if not kind.per_layer else str(layer))
        named = "-" if o["op"] == "-" else f"`{o['op']}` ({o['iteration']}, {o['tile']})"
        caught = "yes" if o["caught"] else "**no**"
        missed += not o["caught"] and kind.where != "model"
        by = [b + (" (column stripes)" if b == "op read-back" and o.get("view") == "columns" else "") for b in o["by"]]
        print(f"| {mode} | {kind.name} | {kind.where} | {where} | {caught} | {', '.join(by) or '-'} | {named} | "
              f"{fmt(o['error'])} / {fmt(o['bound'])} |", flush=True)
    print(f"\nnot caught outside the model kinds: {missed}")


if __name__ == "__main__":
    main(sys.argv[1:])

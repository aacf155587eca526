"""The independent model (compiler/timm_model.py) at full size: its seconds, and with
--trial the default trial's check against it (compiler/model_check.py).

    python experiments/timm_check/model_bench.py [--layers 4] [--repeat 3] [--trial] [--fp8] [key=value ...]

The model is the default trial's (params.yaml's model group: So400m tower, photo:astronaut)
with the given overrides; --fp8 sets model.fp8_activations=true. Without --trial: the
model phase, then `model_outputs` (export + forward) `--repeat` times: the median seconds,
and whether every repeat gave the same bytes. With --trial: every phase on conf/target/
ipu21.yaml (minutes), then run.model_* and the per-output figures."""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from compiler import model_check, timm_model  # noqa: E402
from compiler.phases import compile_trial, model_phase  # noqa: E402


def main(argv):
    layers = int(argv[argv.index("--layers") + 1]) if "--layers" in argv else 4
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    model = dict(params["model"], layers=layers, fp8_activations="--fp8" in argv)
    for kv in (a for a in argv if "=" in a):
        k, v = kv.split("=", 1)
        model[k.removeprefix("model.")] = yaml.safe_load(v)
    if "--trial" in argv:
        target = yaml.safe_load((ROOT / "conf" / "target" / "ipu21.yaml").read_text())
        t0 = time.time()
        r = compile_trial(dict(model=model, target=target, policy=params["policy"]))
        run = r["run"]
        print(f"{model['preset']} tower, {layers} layers, input {model['input']}, fp8_activations "
              f"{model['fp8_activations']}: validated {run.validated}, {time.time() - t0:.0f} s")
        print(json.dumps(run.model, indent=1))
        return
    m = model_phase(dict(model=model))
    a = m.graph.meta["timm"]
    N, D, F = a["tokens"], a["width"], m.graph.tensors["mlp.fc1.weight"].shape[1]
    gflop = (a["depth"] * (2 * N * D * (3 * D + D + 2 * F) + 4 * N * N * D) + 2 * N * D * 3 * a["patch"] ** 2) / 1e9
    times, outs = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        outs.append(model_check.model_outputs(m.graph, m.data))
        times.append(time.perf_counter() - t0)
    same = all(np.array_equal(o[k], outs[0][k]) for o in outs for k in o)
    print(f"{model['preset']} tower, {layers} layers, {a['tokens']} tokens, width {a['width']}, "
          f"{timm_model.THREADS} threads: independent model {statistics.median(times):.1f} s median of "
          f"{repeat} ({', '.join(f'{t:.1f}' for t in times)}), {gflop:.1f} GFLOP; same bytes every time: {same}")


if __name__ == "__main__":
    main(sys.argv[1:])

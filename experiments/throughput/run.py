"""Throughput at full depth (issue #27): the So400m tower at 27 layers on ipu21 with a batch
of B images per run, FP16 or FP8 activations, every phase in-process, validated on the
simulator with read-back (the layers_27 preset: policy.check=sampled, iterations 0, 13, 26).

    python experiments/throughput/run.py B[,B..] [f16|fp8] [key=value ...] >> rows.md
    python experiments/throughput/run.py --expand B[,B..] [f16|fp8] [key=value ...]   # expand's cycles only
    python experiments/throughput/run.py --expand --compute B ...   # + where the compute goes (compute.py)

One markdown row per B: status, the plan family (batch: every matmul's rows are the B
images' tokens, B·729 (+1 padding each), weights gathered from their homes once per run for
all B images), cycles, cycles per image, latency_ms (first image in to last output out:
compiler/run.py throughput), images_per_s (B / latency), min free bytes, the error against
its tolerance (FP8: each output's rms error against the FP16-activation twin, its worst
image's, and the budget), and for a rejection its phase, reason and figures (a rejection is data). The
B images are the held-out photos of compiler/models/photos.py, in order (repeated past 8),
never a calibration photo. Extra Hydra overrides apply to every row."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.models import photos  # noqa: E402
from compiler.phases import PHASES, run_phase  # noqa: E402
from pipeline.config import compose  # noqa: E402

HERE = Path(__file__).resolve().parent


def overrides(b: int, act: str, extra: list) -> list:
    # photo:held_out: the first b held-out photos (compiler/models/photos.py), as the Hydra sweep reads them
    return ["model=vit", "target=ipu21", "+experiment=layers_27", f"model.batch={b}", f"model.input={photos.HELD_OUT_SET}",
            f"model.fp8_activations={'true' if act == 'fp8' else 'false'}", *extra]


def trial(b: int, act: str, extra: list) -> dict:
    cfg = compose(overrides(b, act, extra))
    res, t0 = {}, time.perf_counter()
    # the reference (27 layers of B images in float64) after the phases that may reject:
    # a rejected trial's run passes the rejection through without reading it
    late = ("reference", "run", "report")
    for name in [p for p in PHASES if p not in late] + list(late):
        if name == "reference" and getattr(res["lower"], "rejection", None):
            res[name] = None
            continue
        res[name] = run_phase(name, res, cfg)
    ops = res["report"].plots.get("ops.csv", "")
    groups = getattr(res["plan"], "groups", 0)           # a pipeline (set, or chosen by auto)
    if "cycles" in res["run"].metrics():      # one layer's cycles per op and kind, beside this script
        (HERE / f"ops-{act}-b{b}{f'-g{groups}' if groups else ''}.csv").write_text(ops)   # a pipeline's its own
    return dict(summary=res["report"].summary, run=res["run"].metrics(), place=res["place"].metrics(),
                secs=time.perf_counter() - t0, groups=groups, family=res["plan"].family)


def expand_row(b: int, act: str, extra: list, breakdown: bool = False) -> str:
    """model + plan + expand only: expand's exact cycles (the simulator reproduces them cycle
    for cycle, tests/sim), latency and images/s from them (compiler/run.py throughput); no
    placement, so no min free bytes."""
    from compiler.phases import target_of
    from compiler.run import throughput
    cfg, res, t0, c0 = compose(overrides(b, act, extra)), {}, time.perf_counter(), time.process_time()
    for name in ("model", "plan", "expand"):
        res[name] = run_phase(name, res, cfg)
    e, cmd = res["expand"], f"`run.py --expand {b} {act}{' ' + ' '.join(extra) if extra else ''}`"
    secs = f"{time.perf_counter() - t0:.0f} ({time.process_time() - c0:.0f} CPU)"
    if getattr(e, "rejection", None) or getattr(res["plan"], "rejection", None):
        rej = e.rejection or res["plan"].rejection
        return f"| {b} | {act} | batch | rejected at expand: {rej.message} | - | - | - | - | - | - | {secs} | {cmd} |"
    if breakdown:                                # one layer's compute steps per op (compute.py)
        from compute import write
        print(write(res, cfg, b, act, cmd.strip("`").replace("--expand", "--expand --compute"), extra), file=sys.stderr)
    cyc = e.metrics()["cycles"]
    tp = throughput(res["model"].graph, target_of(cfg), cyc)
    best = e.finalists[0]
    b0, b1 = best.tilegraph.body_steps()         # one layer: exchange and compute supersteps, per image
    kind = np.asarray(best.tilegraph.steps[b0:b1])
    step = np.asarray(best.analysis["step_cycles"][b0:b1])
    xc, cc = (int(step[kind == k].sum()) // b for k in ("exchange", "compute"))
    return (f"| {b} | {act} | batch | expand (layer per image: exchange {xc:,}, compute {cc:,}) | {cyc:,} | "
            f"{cyc // b:,} | {tp['latency_ms']:.4f} | "
            f"{tp['images_per_s']:.1f} | - | - | {secs} | {cmd} |")


def row(b: int, act: str, extra: list) -> str:
    r = trial(b, act, extra)
    s, run = r["summary"], r["run"]
    cmd = f"`run.py {b} {act}{' ' + ' '.join(extra) if extra else ''}`"
    plan = f"pipeline G = {r['groups']}" if r["groups"] else "batch"
    if r["family"]:                            # policy.pipeline_groups=auto: what it priced
        fig = lambda f: f"{f['images_per_s']:.1f} images/s, {f['latency_ms']:.2f} ms" if "cycles" in f else "rejected"
        plan += (f" (auto, {r['family']['objective']}: " + "; ".join(
            f"{'batch' if G == '0' else 'G = ' + G} {fig(f)}" for G, f in r["family"]["candidates"].items()) + ")")
    if "cycles" not in run:
        rej = s.get("rejected", {})
        figs = ", ".join(f"{k} {rej[k]}" for k in ("tile", "live_bytes", "available_bytes", "deficit_bytes")
                         if k in rej)
        return (f"| {b} | {act} | {plan} | {s['status']} | - | - | - | - | - | rejected at {rej.get('phase')} "
                f"({rej.get('reason')}): {figs} | {r['secs']:.0f} | {cmd} |")
    acc = run.get("fp8_accuracy", {})          # FP8: each output against the FP16-activation twin, its budget
    worst = lambda f: f", worst image {f['worst_image_rms_rel_error']:.3%}" if "worst_image_rms_rel_error" in f else ""
    fp8 = "; vs FP16 activations " + ", ".join(f"{n} {f['rms_rel_error']:.3%}{worst(f)} ({f['budget']:.0%})"
                                                for n, f in acc.items()) if acc else ""
    checks = ", ".join(f"{run[k]:,} {w}" for k, w in (("ops_checked", "op read-backs"), ("exchanges_checked", "exchanges"),
                                                       ("boundaries_checked", "boundaries")) if k in run)
    return (f"| {b} | {act} | {plan} | {s['status']} | {run['cycles']:,} | {run['cycles'] // b:,} | "
            f"{run['latency_ms']:.4f} | {run['images_per_s']:.1f} | {r['place'].get('min_free_bytes'):,} | "
            f"{run['max_abs_error']:.4g} / {run['tolerance']:.4g} ({checks}){fp8}"
            f"{'' if run['validated'] else ' ' + run.get('failed', '')} | {r['secs']:.0f} | {cmd} |")


HEADER = ("| B | activations | plan | status | cycles | cycles / image | latency ms | images/s | min free B "
          "| max abs err / tol (or rejection) | host s | command |\n|---:|---|---|---|---:|---:|---:|---:|---:|---|---:|---|")

if __name__ == "__main__":
    args = sys.argv[1:]
    only_expand, breakdown = "--expand" in args, "--compute" in args
    args = [a for a in args if a not in ("--expand", "--compute")]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    bs = [int(x) for x in args[0].split(",")]
    act = args[1] if len(args) > 1 and args[1] in ("f16", "fp8") else "f16"
    extra = [x for x in args[1:] if "=" in x]
    print(HEADER, flush=True)
    for b in bs:
        print(expand_row(b, act, extra, breakdown) if only_expand else row(b, act, extra), flush=True)

"""The spatial pipeline's cost at full depth (issue #27), from expand's exact cycles of each
tile group's program; the arithmetic around them is compiler/plan/pipeline.py.

    python experiments/throughput/groups.py G[,G..] [f16|fp8] [key=value ...] [--batch B] [--tiles w,..]

For G groups of the 27 So400m layers on ipu21 (pipeline.split; tiles by work, the end
groups' head or patch embedding counted as one layer more: pipeline.tiles_for), each
group's program is compiled on a target of its own tiles (`target.tiles=w_g`): the first and
the last group as the tower with their n_g layers (patch embedding and head both: an upper
bound on either), the others as the encoder alone (`model.scope=blocks`, n_g layers); weights
resident where expand's exact screen and cycles choose them (policy.weight_stationary), else
in the group's own homes. One markdown row per G: the groups' cycles, the shift between
groups, the step (slowest group + shift), images/s in the steady state (one image per step,
its host link not overlapped, as the batch rows count it), latency (G steps + the host link
of one image), and the weights' mode. G = 1 is the batch-1 tower (a check on the script).
--batch B: items are micro-batches of B images (G <= 2: both groups are towers). --tiles
w_0,..: the groups' tiles (default: by work). Rows are expand's figures: the pipeline
is not lowered (compiler/plan/pipeline.py says what is missing)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import run_phase, target_of  # noqa: E402
from compiler.plan import pipeline  # noqa: E402
from compiler.sim.load import host_cycles  # noqa: E402
from compiler.models import photos  # noqa: E402
from pipeline.config import compose  # noqa: E402

LAYERS, TILES, ROWS, WIDTH = 27, 1472, 730, 1152      # So400m: 729 tokens + 1 padding row


def group(scope: str, layers: int, tiles: int, act: str, extra: list, batch: int = 1) -> dict:
    ov = ["model=vit", "target=ipu21", f"model.scope={scope}", f"model.layers={layers}", f"target.tiles={tiles}",
          f"model.fp8_activations={'true' if act == 'fp8' else 'false'}", *extra]
    if batch > 1:        # a micro-batch of B images per item: the tower's held-out photos (run.py)
        ov += [f"model.batch={batch}", f"model.input={photos.HELD_OUT_SET}"]
    cfg, res, t0 = compose(ov), {}, time.perf_counter()
    for name in ("model", "plan", "expand"):
        res[name] = run_phase(name, res, cfg)
    e = res["expand"]
    out = dict(scope=scope, layers=layers, tiles=tiles, secs=time.perf_counter() - t0, cfg=cfg, graph=res["model"].graph)
    rej = e.rejection or res["plan"].rejection
    if rej:
        return dict(out, rejected=f"{rej.phase} ({rej.reason}): {rej.message}")
    best = e.finalists[0]
    a = best.analysis
    return dict(out, cycles=int(a["cycles"]), body=int(a["body_cycles"]),
                resident=f"{len(best.candidate.resident)}/{sum(1 for _ in best.candidate.strategy)} matmuls resident")


def row(G: int, act: str, extra: list, batch: int = 1, tiles: list | None = None) -> str:
    counts = pipeline.split(LAYERS, G)
    if batch > 1 and G > 2:
        raise SystemExit("groups.py: micro-batches need every group a tower (G <= 2): model.scope=blocks has no batch")
    # tiles by work: an end group also holds the head (its weights are one layer's: q, kv,
    # proj, fc1, fc2) or the patch embedding, so it counts one layer more
    given = tiles is not None
    if not given:
        tiles = pipeline.tiles_for(TILES, [n + (g in (0, G - 1)) for g, n in enumerate(counts)])
    elif len(tiles) != G or sum(tiles) > TILES:
        raise SystemExit(f"groups.py --tiles {','.join(map(str, tiles))}: {G} groups of at most {TILES} tiles")
    scopes = ["tower" if g in (0, G - 1) else "blocks" for g in range(G)]
    done, secs = {}, 0.0
    for key in dict.fromkeys(zip(scopes, counts, tiles)):
        done[key] = group(*key, act, extra, batch)
        secs += done[key]["secs"]
    gs = [done[k] for k in zip(scopes, counts, tiles)]
    cmd = (f"`groups.py {G} {act}{' ' + ' '.join(extra) if extra else ''}{f' --batch {batch}' if batch > 1 else ''}"
           f"{' --tiles ' + ','.join(map(str, tiles)) if given else ''}`")
    shape = " + ".join(f"{n}L/{w}t" for n, w in zip(counts, tiles)) if G <= 4 else \
        f"{G} × ({min(counts)}-{max(counts)}L / {min(tiles)}-{max(tiles)}t)"
    bad = [g for g in gs if "rejected" in g]
    if bad:
        return f"| {G} | {act} | pipeline | {shape} | rejected: {bad[0]['scope']} {bad[0]['layers']}L on {bad[0]['tiles']} tiles: {bad[0]['rejected']} | - | - | - | - | - | {secs:.0f} | {cmd} |"
    t = target_of(gs[0]["cfg"])
    shift = max(pipeline.shift_cycles(t, ROWS, WIDTH, 2, a, b) for a, b in zip(tiles, tiles[1:])) if G > 1 else 0
    shift *= batch
    st = pipeline.steady([g["cycles"] for g in gs], shift, batch)
    g0 = gs[0]["graph"]                        # the tower's host streams for one image
    size = lambda kind: sum(x.nbytes for x in g0.of_kind(kind))
    host = host_cycles(t, size("input"), size("output"))
    lat_ms = (st.latency + host) / t.clock_hz * 1e3
    ips = batch * t.clock_hz / (st.step + host)   # as the batch rows: host transfers not overlapped
    per = ", ".join(f"{g['scope'][0]}{g['layers']}L/{g['tiles']}t {g['cycles']:,}" for g in done.values())
    return (f"| {G} | {act} | pipeline | {shape} | {per} | {shift:,} | {st.step:,} | {ips:.1f} | {lat_ms:.3f} | "
            f"{'; '.join(sorted({g['resident'] for g in gs}))} | {secs:.0f} | {cmd} |")


HEADER = ("| G | activations | plan | groups (layers / tiles) | group cycles (t: tower, b: blocks) | shift | step "
          "| images/s (steady) | latency ms | weights | host s | command |\n"
          "|---:|---|---|---|---|---:|---:|---:|---:|---|---:|---|")

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    act = args[1] if len(args) > 1 and args[1] in ("f16", "fp8") else "f16"
    batch = int(args[args.index("--batch") + 1]) if "--batch" in args else 1
    tiles = [int(x) for x in args[args.index("--tiles") + 1].split(",")] if "--tiles" in args else None
    extra = [x for x in args[1:] if "=" in x]
    print(HEADER, flush=True)
    for G in (int(x) for x in args[0].split(",")):
        try:
            pipeline.split(LAYERS, G)
        except ValueError as e:          # a bad G: one line, no traceback
            raise SystemExit(f"groups.py {G}: {e}") from None
        print(row(G, act, extra, batch, tiles), flush=True)

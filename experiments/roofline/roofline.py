"""A true lower bound, and separately an estimate, of cycles per So400m encoder layer,
from the target figures alone (no compiler code).

    python experiments/roofline/roofline.py [target] [tokens] [width] [hidden] [heads] [--ops DIR]

writes experiments/roofline/bound.json and prints the tables of results.md. The per-op
tables read the trials' measured per-op cycles from experiments/comm/ops (ops_trial.py);
with --ops DIR the "what the trials spend" tables read DIR/<mode>-<layers>.csv instead
(experiments/depth_sweep/sweep.py --ops DIR) and a before / now table sets them beside
experiments/comm/ops' relay trials.

Two activation modes: `f16` (the default trial: FP16 activations, so the four weight
matmuls run at the FP16 rate, a mixed FP16 x FP8 product running at the slower
operand's) and `fp8` (model.fp8_activations: QKV, projection, fc1 and fc2 FP8 x FP8, plus
the four casts). Q·Kᵀ and P·V are FP16 in both.

bound (no schedule can beat it on the machine model of docs/architecture.md §2; each tile's busy time
is at most the run time, so the run time is at least the average tile's work):
  compute   every MAC of the layer at the AMP peak of all tiles (no channel-group
            padding, no weight loads, no invocation overhead);
  vector    the bytes the layer's vector kernels must read and write at the most a tile's
            ports move, two 64-bit loads and one 64-bit store a cycle (PORT_BYTES, 24 B:
            PopLibs' castWorkerCycles readPorts 2, writePorts 1; no popops / popnn
            estimate moves more: BIAS's inner loop reaches 16 B, a cast 12 B, a binary
            op 8 B), and their exp/tanh/rsqrt at transcendental_elems_per_cycle, spread
            evenly over all tiles (no overhead);
  exchange  only what no placement avoids: weights can stay resident where they are read
            (weight-stationary), so no weight byte need move; the activations of 729 tokens
            (1.7 MB) cannot share one tile, and attention mixes all tokens, so at least one
            exchange phase per layer: its fixed cost, no bytes (a byte count would need a
            communication lower bound this model does not prove);
  sync      two supersteps per layer at least (that exchange and a compute step).
estimate (what a good plan might reach; not a bound):
  compute as above, vector at vector_bytes_per_cycle (a binary op's rate); exchange per
  matmul the least any grid (gm·gn·gk <= tiles)
  must receive on its busiest tile: the activation block, the partials a k-split reduces,
  and B's block when the grid replicates B (gm > 1) or B is an activation (K and V);
  one exchange phase per matmul (two with a k-split) and a sync per superstep.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import yaml

from comm_bound import matmul_recv, split_budget

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OPS = ROOT / "experiments" / "comm" / "ops"     # measured per-op cycles: <mode>-<layers>.csv (ops_trial.py)
DEPTHS = (4, 27)                                # So400m's per-op table; b16: (12,)
PORT_BYTES = 3      # x vector_bytes_per_cycle: two 64-bit loads and one 64-bit store a tile-cycle
PRESETS = {"so400m": ((729, 1152, 4304, 16), DEPTHS, ""), "b16": ((197, 768, 3072, 12), (12,), "b16-")}


def least_exchange(M, K, N, G, a_bytes, tiles, b_bytes, b_moves):
    """Min over grids of the busiest tile's received bytes, and whether it reduces."""
    best = None
    T = tiles
    for gk in range(1, T + 1):
        kb = -(-K // gk)
        for gn in range(1, T // gk + 1):
            nb = -(-N // gn)
            for gm in sorted({1, T // (gk * gn)}):
                if gm < 1:
                    continue
                rows = -(-M * G // gm)
                a = rows * kb * a_bytes
                b = kb * nb * b_bytes if gm > 1 or b_moves else 0
                red = (gk - 1) * -(-rows // gk) * nb * 2
                v = a + b + red
                if best is None or v < best[0]:
                    best = (v, gk > 1)
    return best


def layer(f: dict, T0: int, D: int, F: int, H: int, mode: str) -> dict:
    tiles, dh = f["tiles"], D // H
    rate = f["amp_macs_per_cycle"]
    w_rate = rate["fp8"] if mode == "fp8" else min(rate["f16"], rate["fp8"])
    ab = 1 if mode == "fp8" else 2
    mm = {  # name: (M, K, N, groups, a bytes, rate, B moves, b bytes)
        "qkv": (T0, D, 3 * D, 1, ab, w_rate, False, 1),
        "q.kT": (T0, dh, T0, H, 2, rate["f16"], True, 2),
        "p.v": (T0, T0, dh, H, 2, rate["f16"], True, 2),
        "proj": (T0, D, D, 1, ab, w_rate, False, 1),
        "fc1": (T0, D, F, 1, ab, w_rate, False, 1),
        "fc2": (T0, F, D, 1, ab, w_rate, False, 1),
    }
    compute = sum(M * K * N * G / (r * tiles) for M, K, N, G, _, r, _, _ in mm.values())
    # vector kernels: bytes read + written and transcendentals (docs/architecture.md §2's kernel table)
    vbytes = {"layernorm x2": 2 * 10 * T0 * D,
              "bias x4": 4 * T0 * (3 * D + D + F + D) + 2 * (3 * D + D + F + D),
              "gelu": 4 * T0 * F, "softmax": 6 * H * T0 * T0, "residual adds x2": 2 * 6 * T0 * D}
    trans = {"layernorm x2": 2 * T0, "gelu": T0 * F, "softmax": H * T0 * T0}
    if mode == "fp8":
        vbytes["casts x4"] = 3 * T0 * (D + D + D + F)
    t_cyc = sum(trans.values()) / f["transcendental_elems_per_cycle"]
    vector = (sum(vbytes.values()) / f["vector_bytes_per_cycle"] + t_cyc) / tiles
    vector_floor = (sum(vbytes.values()) / (PORT_BYTES * f["vector_bytes_per_cycle"]) + t_cyc) / tiles
    bound_x = f["exchange_phase_cycles"]
    bound_sync = 2 * f["sync_cycles"]
    bound = dict(compute=round(compute), vector=round(vector_floor), exchange=bound_x, sync=bound_sync)
    bound["total"] = sum(bound.values())
    ex, steps, per_mm = 0, 0, {}
    for name, (M, K, N, G, a, r, bm, bb) in mm.items():
        v, red = least_exchange(M, K, N, G, a, tiles, bb, bm)
        x = -(-v // f["exchange_bytes_per_cycle"]) + f["exchange_phase_cycles"] * (2 if red else 1)
        ex, steps = ex + x, steps + (4 if red else 2)
        per_mm[name] = dict(compute=round(M * K * N * G / (r * tiles)), exchange=int(x))
    est = dict(compute=round(compute), vector=round(vector), exchange=int(ex), sync=steps * f["sync_cycles"])
    est["total"] = sum(est.values())
    return dict(bound=bound, estimate=est, matmuls=per_mm,
                vector_bytes=vbytes, transcendentals=trans)


def per_op_model(T0: int, D: int, F: int, H: int, mode: str) -> tuple[dict, dict]:
    """The layer's matmuls (G, M, K, N, operand bytes, B an activation, AMP dtype) and
    vector ops (bytes read + written, transcendentals), by their graph names (ops.csv).
    `fp8` is the trial's FP8 mode as it runs by default: casts of both LayerNorm outputs
    and of GELU; the attention output stays f16 (model.fp8_fallback), so proj is
    f16 × FP8 at the FP16 rate."""
    dh, a8 = D // H, mode == "fp8"
    w = lambda M, K, N, ea, amp: dict(G=1, M=M, K=K, N=N, ea=ea, eb=1, ep=2, b_act=False, amp=amp)
    x = lambda K, N: dict(G=H, M=T0, K=K, N=N, ea=2, eb=2, ep=2, b_act=True, amp="f16")
    mm = {"qkv.xw": w(T0, D, 3 * D, 1 if a8 else 2, "fp8" if a8 else "f16"), "scores": x(dh, T0),
          "attn": x(T0, dh), "proj.xw": w(T0, D, D, 2, "f16"),
          "fc1.xw": w(T0, D, F, 1 if a8 else 2, "fp8" if a8 else "f16"),
          "fc2.xw": w(T0, F, D, 1 if a8 else 2, "fp8" if a8 else "f16")}
    vec = {"ln1": (10 * T0 * D, T0), "qkv": (4 * T0 * 3 * D + 6 * D, 0), "probs": (6 * H * T0 * T0, H * T0 * T0),
           "proj": (4 * T0 * D + 2 * D, 0), "res1": (6 * T0 * D, 0), "ln2": (10 * T0 * D, T0),
           "fc1": (4 * T0 * F + 2 * F, 0), "gelu": (4 * T0 * F, T0 * F), "fc2": (4 * T0 * D + 2 * D, 0),
           "y": (6 * T0 * D, 0)}
    if a8:
        vec.update({"cast ln1": (3 * T0 * D, 0), "cast ln2": (3 * T0 * D, 0), "cast gelu": (3 * T0 * F, 0)})
    return mm, vec


def measured(mode: str, layers: int, after: str = "", prefix: str = "", src: Path = OPS) -> dict:
    """Per-op measured cycles of a trial (experiments/comm/ops/<prefix><mode>-<layers><after>.csv:
    after "" the start commit's plans, "r" with policy.operand_relay), casts renamed
    'cast <input>'; {} when that trial was not run."""
    p = src / f"{prefix}{mode}-{layers}{after}.csv"
    if not p.exists():
        return {}
    rows = list(csv.DictReader(p.open()))
    out = {}
    for r in rows:
        name = r["name"] if r["kind"] != "cast" else "cast " + r["name"].split(".")[0]
        out[name] = {k: int(r[k]) for k in ("matmul", "vector", "exchange", "sync", "total")}
    return out


def per_op(f: dict, T0: int, D: int, F: int, H: int, mode: str, depths=DEPTHS) -> dict:
    """Per op: compute floor, vector floor, exchange bound at each depth of DEPTHS (the
    layer's weights share the tile's memory: each layer gets tile_bytes / layers for its
    four weights, split as the layer's least total; `alone`: the op with all of it)."""
    P, bw, ph = f["tiles"], f["exchange_bytes_per_cycle"], f["exchange_phase_cycles"]
    tile_bytes = f["memory_end"] - f["memory_base"]
    mm, vec = per_op_model(T0, D, F, H, mode)
    rows = {}
    for n, op in mm.items():
        rows[n] = dict(compute=round(op["G"] * op["M"] * op["K"] * op["N"] / (f["amp_macs_per_cycle"][op["amp"]] * P)),
                       vector=0)
    for n, (b, t) in vec.items():
        rows[n] = dict(compute=0, vector=round((b / (PORT_BYTES * f["vector_bytes_per_cycle"])
                                                + t / f["transcendental_elems_per_cycle"]) / P))
    cyc = lambda recv: int(recv // bw) + (ph if recv > 0 else 0)
    layer = {}
    for L in depths:
        budget = tile_bytes / L
        total, split = split_budget(mm, P, budget)
        for n, op in mm.items():
            r = split.get(n, 0.0)
            rows[n][f"exchange_{L}"] = cyc(matmul_recv(op, P, r))
            rows[n][f"exchange_{L}_alone"] = cyc(matmul_recv(op, P, budget))
            rows[n][f"resident_{L}"] = int(r)
        for n in vec:
            rows[n][f"exchange_{L}"] = rows[n][f"exchange_{L}_alone"] = 0
        layer[f"exchange_{L}"] = int(total // bw) + ph * len(mm)
    layer["compute"] = sum(r["compute"] for r in rows.values())
    layer["vector"] = sum(r["vector"] for r in rows.values())
    return dict(ops=rows, layer=layer)


def per_op_table(mode: str, res: dict, depths=DEPTHS, prefix: str = "", src: Path = OPS) -> str:
    """Markdown: per op, the floors and bounds beside what the trials at `depths` spend
    (the start commit's plans; with src another directory's trials)."""
    DEPTHS = depths
    m = {L: measured(mode, L, "", prefix, src) for L in DEPTHS}
    late = set() if src != OPS else {L for L in DEPTHS if not m[L] and measured(mode, L, "r", prefix)}
    m.update({L: measured(mode, L, "r", prefix) for L in late})   # only the relay trial ran
    head = ("| op | compute floor | vector floor |" + "".join(f" exchange bound {L} L |" for L in DEPTHS)
            + "".join(f" {L} L{' (with the relay)' if L in late else ''}: matmul / vector / exchange / sync |"
                      for L in DEPTHS))
    out = [head, "|---|" + "---:|" * (2 + 2 * len(DEPTHS))]
    tot = {L: [0, 0, 0, 0] for L in DEPTHS}
    extra = sorted({n for L in DEPTHS for n, v in m[L].items() if v["total"]} - set(res["ops"]))
    zero = dict(compute=0, vector=0, **{f"exchange_{L}": 0 for L in DEPTHS})
    for n, r in [*res["ops"].items(), *((n, zero) for n in extra)]:   # extra: the carried value's fill (x)
        cells = []
        for L in DEPTHS:
            v = m[L].get(n)
            if v:
                k = [v["matmul"], v["vector"], v["exchange"], v["sync"]]
                tot[L] = [a + b for a, b in zip(tot[L], k)]
                cells.append(" / ".join(f"{x:,}" for x in k))
            else:
                cells.append("-")
        out.append(f"| {n} | {r['compute']:,} | {r['vector']:,} | "
                   + "".join(f"{r[f'exchange_{L}']:,} | " for L in DEPTHS) + " | ".join(cells) + " |")
    lay = res["layer"]
    out.append(f"| **layer** (all its ops) | **{lay['compute']:,}** | **{lay['vector']:,}** | "
               + "".join(f"**{lay[f'exchange_{L}']:,}** | " for L in DEPTHS) + " | ".join(
                   " / ".join(f"{x:,}" for x in tot[L]) + f" = **{sum(tot[L]):,}**" if m[L] else "-"
                   for L in DEPTHS) + " |")
    return "\n".join(out)


def relay_table(mode: str, res: dict, depths=DEPTHS, prefix: str = "") -> str:
    """Markdown: per op, exchange and total cycles before / after policy.operand_relay."""
    runs = [(L, measured(mode, L, "", prefix), measured(mode, L, "r", prefix)) for L in depths]
    runs = [(L, b, a) for L, b, a in runs if b and a]
    if not runs:
        return "(no before/after trials yet)"
    out = ["| op | exchange bound " + " | ".join(f"{L} L" for L, _, _ in runs) + " | "
           + " | ".join(f"{L} L exchange before → after | {L} L total before → after" for L, _, _ in runs) + " |",
           "|---|" + "---:|" * (3 * len(runs))]
    names = [n for n in res["ops"]] + sorted({n for _, b, _ in runs for n in b} - set(res["ops"]))
    for n in names:
        if all(b.get(n, {}).get("total", 0) == 0 and a.get(n, {}).get("total", 0) == 0 for _, b, a in runs):
            continue
        cells = [f"{res['ops'][n]['exchange_' + str(L)]:,}" if n in res["ops"] else "-" for L, _, _ in runs]
        for L, b, a in runs:
            x0, x1 = b.get(n, {}).get("exchange", 0), a.get(n, {}).get("exchange", 0)
            t0, t1 = b.get(n, {}).get("total", 0), a.get(n, {}).get("total", 0)
            cells += [f"{x0:,} → {x1:,}", f"{t0:,} → {t1:,}"]
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    cells = [f"{res['layer']['exchange_' + str(L)]:,}" for L, _, _ in runs]
    for L, b, a in runs:
        x0, x1 = (sum(v["exchange"] for v in d.values()) for d in (b, a))
        t0, t1 = (sum(v["total"] for v in d.values()) for d in (b, a))
        cells += [f"**{x0:,} → {x1:,}**", f"**{t0:,} → {t1:,}** ({(t1 - t0) / t0:+.1%})"]
    out.append("| **layer** | " + " | ".join(cells) + " |")
    return "\n".join(out)


def costs_table(mode: str, res: dict, now: Path, depths=DEPTHS) -> str:
    """Markdown: per op, total cycles of the relay trials in experiments/comm/ops (before)
    and of the trials in `now`, and the layer's ratio to the bound and the estimate."""
    runs = [(L, measured(mode, L, "r"), measured(mode, L, "", "", now)) for L in depths]
    runs = [(L, b, a) for L, b, a in runs if b and a]
    if not runs:
        return "(no trials in " + str(now) + ")"
    out = ["| op | " + " | ".join(f"{L} L matmul before → now | {L} L vector before → now | "
                                   f"{L} L total before → now" for L, _, _ in runs) + " |",
           "|---|" + "---:|" * (3 * len(runs))]
    names = [n for n in res["ops"]] + sorted({n for _, b, a in runs for n in (*b, *a)} - set(res["ops"]))
    g = lambda d, n, k: d.get(n, {}).get(k, 0)
    for n in names:
        if all(g(b, n, "total") == 0 and g(a, n, "total") == 0 for _, b, a in runs):
            continue
        out.append(f"| {n} | " + " | ".join(f"{g(b, n, k):,} → {g(a, n, k):,}" for _, b, a in runs
                                             for k in ("matmul", "vector", "total")) + " |")
    tot = lambda d, k: sum(v[k] for v in d.values())
    out.append("| **layer** | " + " | ".join(
        f"**{tot(b, k):,} → {tot(a, k):,}**" + (f" ({(tot(a, k) - tot(b, k)) / tot(b, k):+.1%})" if k == "total" else "")
        for _, b, a in runs for k in ("matmul", "vector", "total")) + " |")
    return "\n".join(out)


def ratio_rows(modes: dict, now: Path) -> str:
    """Markdown rows: each trial's cycles per layer before (experiments/comm/ops relay trials)
    and now (`now`), with its ratio to its mode's bound and estimate."""
    out = ["| trial | before: cycles / layer | × bound | × estimate | now: cycles / layer | × bound | × estimate |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for mode in ("f16", "fp8"):
        bd, est = modes[mode]["bound"]["total"], modes[mode]["estimate"]["total"]
        for L in DEPTHS:
            b, a = measured(mode, L, "r"), measured(mode, L, "", "", now)
            if not (b and a):
                continue
            tb, ta = (sum(v["total"] for v in d.values()) for d in (b, a))
            out.append(f"| {L} layers, {mode} activations | {tb:,} | {tb / bd:.2f} | {tb / est:.2f} | "
                       f"**{ta:,}** | **{ta / bd:.2f}** | {ta / est:.2f} |")
    return "\n".join(out)


def main(argv):
    """argv: [target] [tokens width hidden heads] (So400m's by default), or [target] b16;
    --ops DIR anywhere: the trials now (see the module docstring)."""
    now = None
    if "--ops" in argv:
        i = argv.index("--ops")
        now, argv = Path(argv[i + 1]).resolve(), argv[:i] + argv[i + 2:]
    name = argv[0] if argv else "ipu21"
    f = yaml.safe_load((ROOT / "conf" / "target" / f"{name}.yaml").read_text())
    if len(argv) > 1 and argv[1] in PRESETS:
        (T0, D, F, H), depths, prefix = PRESETS[argv[1]]
        res = {m: per_op(f, T0, D, F, H, m, depths) for m in ("f16",)}
        (HERE / f"bound_{argv[1]}.json").write_text(json.dumps(dict(target=name, tokens=T0, width=D, hidden=F,
                                                                    heads=H, per_op=res), indent=1) + "\n")
        for m, r in res.items():
            print(f"\n### {argv[1]}, per op, {m} activations\n\n" + per_op_table(m, r, depths, prefix))
            print(f"\n### {argv[1]}, per op, {m} activations: before / after policy.operand_relay\n")
            print(relay_table(m, r, depths, prefix))
        return
    T0, D, F, H = (int(x) for x in (argv[1:5] if len(argv) > 4 else (729, 1152, 4304, 16)))
    out = dict(target=name, tokens=T0, width=D, hidden=F, heads=H,
               modes={m: layer(f, T0, D, F, H, m) for m in ("f16", "fp8")},
               per_op={m: per_op(f, T0, D, F, H, m) for m in ("f16", "fp8")})
    (HERE / "bound.json").write_text(json.dumps(out, indent=1) + "\n")
    print("| activations | | compute | vector | exchange | sync | cycles / layer |\n|---|---|---:|---:|---:|---:|---:|")
    for m, r in out["modes"].items():
        for kind in ("bound", "estimate"):
            b = r[kind]
            print(f"| {m} | {kind} | {b['compute']:,} | {b['vector']:,} | {b['exchange']:,} | {b['sync']:,} "
                  f"| **{b['total']:,}** |")
    for m, r in out["modes"].items():
        print(f"\n### estimate's matmuls, {m} activations\n\n| op | compute | exchange |\n|---|---:|---:|")
        for op, v in r["matmuls"].items():
            print(f"| {op} | {v['compute']:,} | {v['exchange']:,} |")
    if now is not None:
        print("\n### cycles per layer against the bound and the estimate: before / now\n")
        print(ratio_rows(out["modes"], now))
    for m, r in out["per_op"].items():
        print(f"\n### per op, {m} activations: floors, exchange bounds, and what the trials spend\n")
        print(per_op_table(m, r, src=now or OPS))
        if now is not None:
            print(f"\n### per op, {m} activations: total cycles before / now\n")
            print(costs_table(m, r, now))
        print(f"\n### per op, {m} activations: before / after policy.operand_relay\n")
        print(relay_table(m, r))


if __name__ == "__main__":
    main(sys.argv[1:])

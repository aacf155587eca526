"""What each ring variant of the Repeat body's weight matmuls buys, and what it costs in
memory: expand's exact body cycles, the least free bytes of a tile and of region 1.

    python experiments/comm/combos.py [key=value ...] [--base=qkv.xw=1,...] [--combo=qkv.xw=1u,proj.xw=2,...]

Plan's best candidate with every ring's pieces word-cut and copied (plan/ring.py word_cut:
policy.ring_units off, main's rings) is the base; each weight matmul's grid is then tried
alone with 1 or 2 holders a piece, word-cut or in 2-D units read in place (`u`,
policy.ring_units), the others as in the base. --combo sets several at once (holders,
then `u` for units), e.g. the figures of a plan the beam's memory estimate rejects;
--base sets the base's rings so (e.g. main's plan, to swap from)."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.expand import expand_one  # noqa: E402
from compiler.phases import policy_of, run_phase, target_of  # noqa: E402
from compiler.plan.ring import word_cut  # noqa: E402
from pipeline.config import compose  # noqa: E402


def main(argv):
    flag = lambda f: [a.split("=", 1)[1] for a in argv if a.startswith(f"--{f}=")]
    combos = flag("combo")
    cfg = compose(["model=vit", "target=ipu21", *[a for a in argv if not a.startswith("--")]])
    res = {"model": run_phase("model", {}, cfg)}
    g, t, pol = res["model"].graph, target_of(cfg), policy_of(cfg)
    base = word_cut(run_phase("plan", res, cfg).candidates[0])
    grid = dict(base.strategy)
    names = {g.ops[n].outputs[0]: n for n, gr in base.strategy if gr.ring}
    variant = lambda n, v: replace(grid[n], copies=int(v[0]), inplace=3 if v.endswith("u") else 0)
    spec = lambda cmb: {names[k]: variant(names[k], v) for k, v in (kv.split("=") for kv in cmb.split(","))}
    for cmb in flag("base"):
        base = replace(base, strategy=tuple((n, spec(cmb).get(n, gr)) for n, gr in base.strategy))

    def run(over: dict, tag: str):
        e = expand_one(replace(base, strategy=tuple((n, over.get(n, gr)) for n, gr in base.strategy)), g, t, pol)
        a = e.analysis
        free = int(t.tile_bytes - np.max(a["footprint_bytes"]))
        r1 = int(a["region1_bytes"] - np.max(a["region1_live_bytes"]))
        print(f"  {tag:44s} body {a['body_cycles']:7d}  least free {free:8d}  region 1 free {r1:8d}  {e.reason}",
              flush=True)

    print("base:", base.label)
    run({}, "base (word-cut rings)")
    if not combos:
        for name, n in names.items():
            for v in ("1", "1u", "2", "2u"):
                run({n: variant(n, v)}, f"{name} {variant(n, v).label}")
    for cmb in combos:
        run(spec(cmb), cmb)


if __name__ == "__main__":
    main(sys.argv[1:])

"""One trial's per-op cycles (compiler/report/ops.py: matmul, vector, exchange, sync of
one layer) as experiments/comm/ops/<label>.csv, plus its headline in <label>.json.

    python experiments/comm/ops_trial.py LABEL [key=value ...]

e.g. `ops_trial.py f16-27 model.layers=27`. Every phase in-process (serial mapper), the
same phases as `dvc repro` / `python -m pipeline.trial`."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compiler.phases import PHASES, run_phase  # noqa: E402
from compiler.plan import weight_modes  # noqa: E402
from pipeline.config import compose  # noqa: E402

HERE = Path(__file__).resolve().parent


def main(argv: list[str], here: Path = HERE) -> None:
    """Writes here/ops/<label>.{csv,json} (another study passes its own folder)."""
    label, overrides = argv[0], argv[1:]
    cfg = compose(["model=vit", "target=ipu21", *overrides])
    res, secs = {}, {}
    for name in PHASES:
        t0 = time.perf_counter()
        res[name] = run_phase(name, res, cfg)
        secs[name] = round(time.perf_counter() - t0, 1)
    s = res["report"].summary
    out = dict(label=label, overrides=overrides, status=s["status"], run=res["run"].metrics(), secs=secs)
    placed = getattr(res["place"], "placement", None)
    if placed is not None and res["expand"].finalists:
        cand = res["expand"].finalists[placed.finalist].candidate
        out["candidate"] = cand.label
        out["weights"] = weight_modes(res["model"].graph, cand)
        (here / "ops" / f"{label}.csv").write_text(res["report"].plots["ops.csv"])
    (here / "ops" / f"{label}.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(json.dumps({k: out[k] for k in ("label", "status", "secs")}), out["run"].get("cycles_per_layer"))


if __name__ == "__main__":
    main(sys.argv[1:])

"""`python -m pipeline.trial key=value ...`: every phase in-process for a quick look,
with Hydra overrides (and `--multirun` sweeps). Writes summary.json and profile.html
into Hydra's run directory (artifacts/trials/...), and prints the headline figures.

    python -m pipeline.trial target=ipu21 model.m=512 model.k=1152 model.n=1152
    python -m pipeline.trial --multirun model.dtype=f16,fp8
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from compiler.phases import PHASES, run_phase, target_of
from compiler.report import report
from compiler.target import ConfigError

from .config import validate
from .fanout import Executor, ExecutorConfig
from .stages import StoreError, make_mapper
from .store import Store


def trial(cfg: dict, out_dir: Path) -> dict:
    validate(cfg, "overrides")
    res, host = {}, {}
    with Executor(ExecutorConfig.from_dict(cfg["executor"])) as ex:
        mapper = make_mapper(ex, Store(cfg.get("store") or ".tessera-store"))
        for name in PHASES:
            t0 = time.perf_counter()
            if name == "report":
                res[name] = report(*(res[u] for u in PHASES[name][0]), target_of(cfg), host=host)
            else:
                res[name] = run_phase(name, res, cfg, mapper)
            host[name] = {"elapsed_s": round(time.perf_counter() - t0, 3)}
    rep = res["report"]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "profile.html").write_text(rep.html)
    summary = {"status": rep.summary["status"], **{p: res[p].metrics() for p in PHASES if p != "report"},
               "rejected": rep.summary.get("rejected"), "host": host}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        s = trial(OmegaConf.to_container(cfg, resolve=True), out)
    except (ConfigError, StoreError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    r = s["run"]
    line = (f"status={s['status']} cycles={r.get('cycles')} ms={r.get('ms')} "
            f"max_abs_error={r.get('max_abs_error')} tolerance={r.get('tolerance')}")
    if s["rejected"]:
        line += f" rejected={s['rejected']}"
    print(f"{line}\n  profile: {out / 'profile.html'}")


if __name__ == "__main__":
    main()

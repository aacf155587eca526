"""`python -m pipeline.trial key=value ...`: every phase in-process for a quick look,
with Hydra overrides (and `--multirun` sweeps). Writes summary.json and profile.html
into Hydra's run directory (artifacts/trials/...), and prints the headline figures.

    python -m pipeline.trial target=ipu21 model.m=512 model.k=1152 model.n=1152
    python -m pipeline.trial --multirun model.dtype=f16,fp8
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from compiler.phases import PHASES, run_phase, target_of
from compiler.report import report
from compiler.target import ConfigError

from .config import GROUPS, compose, validate
from .fanout import Executor, ExecutorConfig
from .monitor import HostMonitor
from .stages import StoreError, make_mapper, write_atomic
from .store import Store


def trial(cfg: dict, out_dir: Path) -> dict:
    validate(cfg, "overrides")
    res, host = {}, {}
    with Executor(ExecutorConfig.from_dict(cfg["executor"])) as ex:
        mapper = make_mapper(ex, Store(cfg.get("store") or ".tessera-store"))
        for name in PHASES:
            # the same host monitor as the stages: RSS of the process tree (workers included)
            with HostMonitor(out_dir / "host" / name, interval=0.2) as mon:
                if name == "report":
                    res[name] = report(*(res[u] for u in PHASES[name][0]), target_of(cfg), host=host)
                else:
                    res[name] = run_phase(name, res, cfg, mapper)
            host[name] = {"elapsed_s": round(mon.elapsed_s, 3), "peak_rss_mib": round(mon.peak_rss_mib, 2)}
    rep = res["report"]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "profile.html", rep.html.encode())
    summary = {"status": rep.summary["status"], **{p: res[p].metrics() for p in PHASES if p != "report"},
               "rejected": rep.summary.get("rejected"), "host": host}
    write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2, default=str).encode())
    return summary


def check_overrides(args: list[str]) -> None:
    """Fail fast, in one line, on an override Hydra would reject with a multi-line
    message: an unknown key, an unknown group option, a malformed override."""
    ovr = [a for a in args if not a.startswith("-") and "=" in a and not a.startswith("hydra")]
    bad = [a for a in args if not a.startswith("-") and "=" not in a]
    if bad:
        raise ConfigError(f"override {bad[0]!r} is not key=value")
    groups, keys = {}, []
    for o in ovr:
        k, _, v = o.partition("=")
        if k.lstrip("+~") in GROUPS:
            groups[k] = v.split(",")           # a --multirun sweep over group options
        elif not k.startswith(("+", "~")):
            keys.append(k)
    choices = [[]]
    for k, opts in groups.items():
        choices = [c + [f"{k}={o}"] for c in choices for o in opts]
    for c in choices:
        try:
            cfg = compose(c)
        except Exception as e:
            raise ConfigError(f"override {' '.join(c)}: {str(e).splitlines()[0]}") from None
        for k in keys:
            node = cfg
            for part in k.split("."):
                if not isinstance(node, dict) or part not in node:
                    raise ConfigError(f"unknown config key {k!r}" + (f" (with {' '.join(c)})" if c else ""))
                node = node[part]


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        s = trial(OmegaConf.to_container(cfg, resolve=True), out)
    except (ConfigError, StoreError, ValueError) as e:
        import shutil
        shutil.rmtree(out, ignore_errors=True)   # no partial trial directory (Hydra's .hydra/ included)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    r = s["run"]
    line = (f"status={s['status']} cycles={r.get('cycles')} ms={r.get('ms')} "
            f"max_abs_error={r.get('max_abs_error')} tolerance={r.get('tolerance')}")
    if s["rejected"]:
        line += f" rejected={s['rejected']}"
    print(f"{line}\n  profile: {out / 'profile.html'}")


if __name__ == "__main__":
    try:
        check_overrides(sys.argv[1:])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    main()

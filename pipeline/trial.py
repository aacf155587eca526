"""`python -m pipeline.trial key=value ...`: every phase in-process for a quick look,
with Hydra overrides (and `--multirun` sweeps, the flag before or after the overrides).
Writes summary.json and profile.html into Hydra's run directory (artifacts/trials/...),
and prints the headline figures; a multirun also prints and writes one table of its trials.

    python -m pipeline.trial target=ipu21 model.m=512 model.k=1152 model.n=1152
    python -m pipeline.trial model=gemm target=tiny --multirun model.m=32,64

`--help` prints the Hydra help (conf/config.yaml `hydra.help`)."""
from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from compiler.phases import PHASES, run_phase, target_of
from compiler.report import rejection_line, report
from compiler.target import ConfigError

from .config import REPO, check_overrides, validate
from .fanout import Executor, ExecutorConfig
from .monitor import HostMonitor
from .stages import StoreError, make_mapper, write_atomic
from .store import Store

MULTIRUN_FLAGS = ("--multirun", "-m")
TABLE = "trials.md"      # a multirun's table, in its sweep directory
OUTPUTS = "output.npz"   # a trial's outputs: `<name>` the device's, `reference/<name>` the reference's
# the table's columns: (heading, summary key path)
COLUMNS = (("status", ("status",)), ("cycles", ("run", "cycles")), ("cycles/layer", ("run", "cycles_per_layer")),
           ("ms", ("run", "ms")), ("images/s", ("run", "images_per_s")),   # images/s, latency: towers only
           ("latency ms", ("run", "latency_ms")),
           ("max abs error", ("run", "max_abs_error")), ("tolerance", ("run", "tolerance")),
           ("min free B", ("place", "min_free_bytes")), ("host s", ("host_s",)))
_trials: list[tuple[str, dict]] = []     # (overrides, summary) of each job of this process's multirun
_sweep: list[Path] = []                  # the multirun's sweep directory (its jobs' parent)


def trial(cfg: dict, out_dir: Path, run=run_phase) -> dict:
    """Every phase in-process into `out_dir`; `run(name, results, cfg, mapper)` computes a phase
    (pipeline/sweep.py passes one that reuses phases already in the store)."""
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
                    res[name] = run(name, res, cfg, mapper)
            host[name] = {"elapsed_s": round(mon.elapsed_s, 3), "peak_rss_mib": round(mon.peak_rss_mib, 2)}
    rep = res["report"]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "profile.html", rep.html.encode())
    if res["run"].rejection is None:      # the graph's outputs, device and reference (as artifacts/run/output.npz)
        write_atomic(out_dir / OUTPUTS, res["run"].output_npz())
    summary = {"status": rep.summary["status"], **{p: res[p].metrics() for p in PHASES if p != "report"},
               "rejected": rep.summary.get("rejected"), "host": host}
    write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2, default=str).encode())
    return summary


def headline_line(s: dict) -> str:
    """The trial's one line: its figures when it ran, its rejection when it did not."""
    if s.get("rejected"):
        return f"status={rejection_line(s['rejected'])}"
    r = s["run"]
    fp8 = r.get("rms_rel_error_vs_fp16_activations")
    return (f"status={s['status']} cycles={r['cycles']} cycles_per_layer={r['cycles_per_layer']} "
            f"ms={r['ms']} max_abs_error={r['max_abs_error']:.3g} tolerance={r['tolerance']:.3g}"
            + ("" if fp8 is None else f" rms_vs_fp16_activations={fp8:.3g}"))


def _cell(s: dict, path: tuple) -> str:
    if path == ("host_s",):
        return f"{sum(h['elapsed_s'] for h in s.get('host', {}).values()):.1f}"
    v = s
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    if v is None:
        return "-"
    return f"{v:.3g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def table(trials: list[tuple[str, dict]]) -> str:
    """One markdown row per trial: its overrides, the headline figures, or its rejection."""
    head = ["#", "overrides", *(c for c, _ in COLUMNS), "rejected"]
    rows = [[str(i), ovr or "-", *(_cell(s, p) for _, p in COLUMNS),
             rejection_line(s["rejected"]) if s.get("rejected") else "-"] for i, (ovr, s) in enumerate(trials)]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def remove_trial_dir(out: Path) -> None:
    """No partial trial directory (Hydra's .hydra/ included), nor the empty folders above it
    (a sweep directory holding only Hydra's multirun.yaml counts as empty)."""
    shutil.rmtree(out, ignore_errors=True)
    if [p.name for p in out.parent.iterdir()] == ["multirun.yaml"] if out.parent.is_dir() else False:
        shutil.rmtree(out.parent, ignore_errors=True)
    for d in out.parents:
        if d == REPO or REPO not in d.parents:
            break
        try:
            d.rmdir()       # only if empty
        except FileNotFoundError:
            continue
        except OSError:
            break


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    # the fan-out's progress line is its report; its INFO log line would repeat it under Hydra's logging
    logging.getLogger("pipeline").setLevel(logging.WARNING)
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    try:
        s = trial(OmegaConf.to_container(cfg, resolve=True), out)
    except (ConfigError, StoreError, ValueError) as e:
        remove_trial_dir(out)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if hc.mode.name == "MULTIRUN":
        _trials.append((" ".join(hc.overrides.task), s))
        _sweep[:] = [out.parent]
    print(f"{headline_line(s)}\n  profile: {out / 'profile.html'}"
          + (f"\n  outputs: {out / OUTPUTS}" if (out / OUTPUTS).is_file() else ""))


def multirun_table() -> None:
    """After a multirun: print the table of its trials and write it beside them."""
    if not _trials:
        return
    text = table(_trials)
    write_atomic(_sweep[0] / TABLE, (text + "\n").encode())
    print(f"\n{text}\n  table: {_sweep[0] / TABLE}")


# Hydra's own flags that take a value (`--cfg job`, `-cn config`, ...): the value is no override
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
               "--config-dir", "-cd", "--experimental-rerun", "--shell-completion", "-sc"}
INFO_FLAGS, INFO_VALUES = {"--info", "-i"}, {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


def overrides_of(argv: list[str]) -> list[str]:
    """The overrides of a command line: Hydra's flags and their values left out."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in VALUE_FLAGS or (a in INFO_FLAGS and i + 1 < len(argv) and argv[i + 1] in INFO_VALUES):
            skip = True
        elif not a.startswith("-"):
            out.append(a)
    return out


def hydra_argv(argv: list[str]) -> list[str]:
    """`--multirun` anywhere (as Hydra users write it: after the overrides too) goes first,
    where Hydra's argument parser accepts it."""
    flags = [a for a in argv if a in MULTIRUN_FLAGS]
    return flags[:1] + [a for a in argv if a not in MULTIRUN_FLAGS]


if __name__ == "__main__":
    args = hydra_argv(sys.argv[1:])
    if "--help" not in args and "-h" not in args and "--hydra-help" not in args:
        try:
            check_overrides(overrides_of(args), multirun=args[:1] == ["--multirun"] or args[:1] == ["-m"])
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
    sys.argv[1:] = args
    main()
    multirun_table()

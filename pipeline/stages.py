"""Stage entry points: `python -m pipeline <phase>` (what dvc.yaml runs).

A stage reads params.yaml, loads its upstream artifacts, runs the compiler phase
with a mapper that fans out over Dask through the content-addressed store, and
writes artifacts/<phase>/result.pkl, metrics/<phase>.json and the host monitor
files, all atomically. A rejection is a result (exit 0); bad input is a one-line
error (exit 2)."""
from __future__ import annotations

import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

import cloudpickle

import compiler
from compiler.phases import PHASES, run_phase
from compiler.report import report
from compiler.target import ConfigError

from .config import REPO, load_params
from .fanout import Executor, ExecutorConfig, map_reduce
from .monitor import HostMonitor
from .store import Store, StoreError, digest, task_key

ART = REPO / "artifacts"
METRICS = REPO / "metrics"
PLOTS = METRICS / "plots"       # dvc plots data written by the report stage (git-tracked, small)
RESULT = "result.pkl"
UNITS = {"expand": "candidates", "place": "tile problems"}   # what the progress line counts
CODE = sorted(str(p) for p in Path(compiler.__file__).parent.rglob("*.py"))  # the compiler's code version


class StageError(Exception):
    """Missing or unreadable upstream artifact, unwritable output: a one-line error."""


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj) -> None:
    write_atomic(path, (json.dumps(obj, indent=2, sort_keys=True, default=_plain) + "\n").encode())


def _plain(o):
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def load_result(phase: str):
    path = ART / phase / RESULT
    try:
        return pickle.loads(path.read_bytes())
    except FileNotFoundError:
        raise StageError(f"missing upstream artifact {path.relative_to(REPO)}: "
                         f"run `dvc repro {phase}` first") from None
    except Exception as e:
        raise StageError(f"unreadable upstream artifact {path.relative_to(REPO)} ({e}): "
                         f"rerun `dvc repro -f {phase}`") from None


def make_mapper(executor: Executor, store: Store):
    """The compiler's mapper contract over map_reduce: cached per item by
    (task, compiler code version, digest of the shared inputs, digest of the item)."""
    def mapper(task, fn, items, reduce, init, shared=None):
        shared = shared or {}
        base = digest(shared)
        key = lambda item: task_key(task, CODE, [base, digest(item)], {})

        def detached(acc, i, result):
            # A freshly computed result may share objects with the inputs; one read back
            # from the store does not, and pickle writes the two differently. Reduce a
            # detached copy either way, so a resumed run writes byte-identical artifacts.
            return reduce(acc, i, cloudpickle.loads(cloudpickle.dumps(result, protocol=5)))
        return map_reduce(fn, items, detached, init, executor=executor, store=store, key=key,
                          label=task, scatter=shared, unit=UNITS.get(task, "items"))
    return mapper


def host_figures() -> dict:
    """host.<phase>.{elapsed_s,peak_rss_mib} of the stages before the report, from their
    metrics files (git-tracked, so present in a queued experiment's workspace too)."""
    out = {}
    for phase in PHASES:
        try:
            h = json.loads((METRICS / f"{phase}.json").read_text()).get("host", {}).get(phase)
        except (FileNotFoundError, ValueError):
            h = None
        if h:
            out[phase] = h
    return out


def outputs_of(phase: str) -> list[Path]:
    """Every file the stage writes (removed again if the stage fails)."""
    out = ART / phase
    files = [out / "host-memory.jsonl", out / "host-time.json"]
    if phase == "report":
        return files + [out / "profile.html", METRICS / "trial.json", PLOTS / "supersteps.csv",
                        PLOTS / "tiles.csv", PLOTS / "ops.csv"]
    return files + [out / RESULT, METRICS / f"{phase}.json"]


def run_stage(phase: str, params: str | Path | None = None) -> object:
    if phase not in PHASES:
        raise ConfigError(f"unknown phase {phase!r} (one of {', '.join(PHASES)})")
    # everything that can be checked is checked before anything is written
    cfg = load_params(params) if params else load_params()
    store = Store(cfg.get("store") or REPO / ".tessera-store")
    ups, _ = PHASES[phase]
    inputs = {u: load_result(u) for u in ups}
    out = ART / phase
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StageError(f"cannot create {out.relative_to(REPO)}: {e.strerror or e}") from None
    try:
        with HostMonitor(out) as mon, Executor(ExecutorConfig.from_dict(cfg["executor"])) as ex:
            if phase == "report":   # the report also shows host time and RSS of the stages before it
                res = report(*(inputs[u] for u in ups), compiler.phases.target_of(cfg), host=host_figures())
            else:
                res = run_phase(phase, inputs, cfg, make_mapper(ex, store))
        host = {phase: {"elapsed_s": round(mon.elapsed_s, 3), "peak_rss_mib": round(mon.peak_rss_mib, 2)}}
        if phase == "report":
            write_atomic(out / "profile.html", res.html.encode())
            for name, text in res.plots.items():
                write_atomic(PLOTS / name, text.encode())
            write_json(METRICS / "trial.json", {**res.summary, "host": host})
        else:
            write_atomic(out / RESULT, pickle.dumps(res, protocol=4))
            write_json(METRICS / f"{phase}.json", {phase: res.metrics(), "host": host})
    except BaseException:
        for f in outputs_of(phase):   # no partial outputs: a failed stage leaves none of its files
            f.unlink(missing_ok=True)
        raise
    rej = getattr(res, "rejection", None)
    if rej and rej.phase == phase:
        print(f"{phase}: rejected ({rej.reason}): {rej.message}", file=sys.stderr)
    return res


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: python -m pipeline <phase>   (phases: {', '.join(PHASES)})", file=sys.stderr)
        return 2
    try:
        run_stage(argv[0])
    except (ConfigError, StageError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:   # e.g. an unwritable artifacts/ or metrics/ directory
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        print(f"error: cannot write{where}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0

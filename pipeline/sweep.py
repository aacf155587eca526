"""`python -m pipeline.sweep key=a,b ...`: a Hydra sweep whose trials run as tasks on a Dask
cluster, all sharing one content-addressed store, gathered into one table (docs/cluster.md).

    python -m pipeline.sweep model=gemm target=tiny model.m=32,64 policy.exchange_table_cap=65536,16 \\
        executor=cluster executor.address=tcp://SCHEDULER:8786 store=file:///shared/tessera-store

The overrides are `python -m pipeline.trial --multirun`'s (comma lists, range(), choice()); every
point is composed and checked here before anything runs (pipeline/config.py: trials_of,
check_overrides). Where the trials run is the `executor` group, which every point must share:
`cluster` sends each trial to the scheduler at `executor.address`; `processes` starts a loopback
cluster of `executor.workers` processes for the sweep; `sync`/`threads` run the trials one after
another in this process (as --multirun does). One trial is one task (a trial whose worker died
is rerun on another by the scheduler); on a worker its own fan-out runs inside that worker
process (`--trial-threads`): a sweep's parallelism is its workers.

Nothing computed twice. Every phase but report (whose profile carries this run's host figures)
is stored when it finishes, under a key of (phase, the compiler's code version, what the phase
reads: the model group for model and reference, otherwise everything but executor and store; a
model's input files by content), beside the fan-out's per-item entries. A trial rerun after its
worker was killed starts from the phases and items already stored; trials of a sweep that share
a model share its model and reference phases, one computing while another that needs them
waits (Store.once; `--no-phase-store`: fan-out items only).

Results come back to this process with the task (summary, profile, outputs, host figures) and
are written under the sweep directory (artifacts/trials/sweep-<date-time>/, or --dir): N/ per
trial as pipeline.trial writes it, plus its composed config.yaml and sweep.json (worker, pid,
each phase computed or reused, with its store key); trials.md, the table, at the top. A worker
that runs other code than this checkout is refused (an error row).

File map: expand() the sweep's points; phase_key and stored_phases (the phase store); run_trial
(one trial, on a worker); label, spread, dispatch and sweep() (on the client); the CLI (main).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

import yaml

from compiler.phases import run_phase
from compiler.target import ConfigError

from .config import REPO, check_overrides, compose, trials_of
from .fanout import Executor, ExecutorConfig
from .inputs import KEYS as INPUT_KEYS
from .progress import Progress
from .stages import CODE, StoreError, write_atomic
from .store import Store, code_version, task_key
from .trial import TABLE, headline_line, table, trial

MODEL_ONLY = ("model", "reference")   # compiler/phases.py: model_phase reads cfg["model"] alone, reference_phase no cfg
NOT_RESULT = ("executor", "store")    # how and where a result is computed and kept, never what it is
SWEEP_CODE = CODE + ["pipeline"]      # a worker must run the same compiler and pipeline as the client
DISPATCH = {"cluster": "cluster", "processes": "processes", "threads": "sync", "sync": "sync"}


# --------------------------------------------------------------------------------------------
# The sweep's trials
# --------------------------------------------------------------------------------------------

def expand(args: list[str], cwd: Path | None = None) -> list[tuple[str, dict]]:
    """(overrides, composed config) of every point of the sweep, each checked; the store and
    the model's input files made absolute (a worker's working directory is not ours)."""
    hydra_keys = [a for a in args if a.startswith("hydra.")]
    if hydra_keys:
        raise ConfigError(f"override {hydra_keys[0]!r}: Hydra's own keys do not apply to a sweep "
                          f"(the sweep directory is --dir)")
    check_overrides(args, multirun=True)
    cwd = Path(cwd or os.getcwd())
    points = [(" ".join(t), compose(t)) for t in trials_of(args, multirun=True)]
    first = points[0][1]
    for ovr, cfg in points:
        for g in NOT_RESULT:
            if cfg.get(g) != first.get(g):
                raise ConfigError(f"override {ovr!r}: {g} must be the same for every trial of a sweep "
                                  f"(it says where trials run and where results are kept)")
    for _, cfg in points:
        cfg["store"] = _absolute(str(cfg.get("store") or ".tessera-store"), cwd)
        for k in INPUT_KEYS:
            v = cfg["model"].get(k)
            if v:
                cfg["model"][k] = [_input_path(p, cwd) for p in v] if isinstance(v, list) else _input_path(v, cwd)
    return points


def _absolute(url: str, cwd: Path) -> str:
    if "://" in url:
        return url
    return str((cwd / url).resolve())


def _input_path(p: str, cwd: Path) -> str:
    from compiler.models import photos
    return p if photos.is_photo(p) else str((cwd / p).resolve())


# --------------------------------------------------------------------------------------------
# Phases in the store
# --------------------------------------------------------------------------------------------

_file_sha: dict[tuple[str, int, int], str] = {}


def _content(p: str) -> str:
    """A model input by content: the same file anywhere has one key, a changed one another."""
    from compiler.models import photos
    if not p or photos.is_photo(p):
        return p
    st = os.stat(p)
    k = (p, st.st_mtime_ns, st.st_size)
    if k not in _file_sha:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
        _file_sha[k] = "sha256:" + h.hexdigest()
    return _file_sha[k]


def phase_key(name: str, cfg: dict) -> str:
    """The store key of a phase's result: what it reads, and the compiler's code version."""
    model = dict(cfg["model"])
    for k in INPUT_KEYS:
        v = model.get(k)
        if v:
            model[k] = [_content(p) for p in v] if isinstance(v, list) else _content(v)
    scope = {"model": model} if name in MODEL_ONLY else {
        **{g: v for g, v in cfg.items() if g not in NOT_RESULT}, "model": model}
    return task_key(f"phase.{name}", CODE, [], scope)


def compute_phase(key: str, name: str, res: dict, cfg: dict, mapper):
    """A phase computed (the one place a sweep computes one: tests count calls here)."""
    return run_phase(name, res, cfg, mapper)


def stored_phases(store: Store | None, cfg: dict, log: dict):
    """A phase runner for trial(): a phase already in `store` is read back, not computed; one
    computed is stored at once; one being computed by another trial (a shared model's reference)
    is waited for and read back (Store.once). `log[name] = [computed|stored, key]`."""
    def run(name, res, cfg_, mapper):
        key = phase_key(name, cfg)
        compute = lambda: compute_phase(key, name, res, cfg_, mapper)  # noqa: E731
        v, computed = store.once(key, compute) if store is not None else (compute(), True)
        log[name] = ["computed" if computed else "stored", key]
        return v
    return run


# --------------------------------------------------------------------------------------------
# One trial (on a worker, or in this process)
# --------------------------------------------------------------------------------------------

def _scratch() -> str | None:
    try:
        from distributed import get_worker
        return get_worker().local_directory
    except (ImportError, ValueError):
        return None


def run_trial(item: tuple) -> dict:
    """One trial, returned with its files: the client writes them (a worker's disk is its own).
    Bad input and bugs are an error record, so one trial cannot end the others."""
    index, overrides, cfg, opts = item
    log: dict = {}
    rec = {"index": index, "overrides": overrides, "host": socket.gethostname(), "pid": os.getpid(),
           "code": code_version(SWEEP_CODE), "phases": log, "summary": None, "error": None, "files": {}}
    if rec["code"] != opts["code"]:
        rec["error"] = (f"worker {rec['host']} pid {rec['pid']} runs other code than the sweep's checkout "
                        f"(code version {rec['code'][:12]}, expected {opts['code'][:12]}): start it from the same commit")
        return rec
    if opts["inner"] is not None:
        cfg = {**cfg, "executor": {**cfg["executor"], **opts["inner"], "address": None}}
    work = Path(tempfile.mkdtemp(prefix=f"tessera-trial-{index}-", dir=_scratch()))
    try:
        store = Store(cfg["store"]) if opts["phase_store"] else None
        rec["summary"] = trial(cfg, work, run=stored_phases(store, cfg, log))
    except (ConfigError, StoreError, ValueError) as e:
        rec["error"] = str(e)
    except Exception as e:    # a bug: its traceback goes to the trial's error.txt
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["files"]["error.txt"] = traceback.format_exc().encode()
    if rec["summary"] is not None:
        rec["files"].update({p.relative_to(work).as_posix(): p.read_bytes()
                             for p in sorted(work.rglob("*")) if p.is_file()})
    shutil.rmtree(work, ignore_errors=True)
    return rec


# --------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------

def _write_trial(d: Path, cfg: dict, rec: dict) -> None:
    for rel, data in rec["files"].items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"trial {rec['index']}: a worker returned the file {rel!r}, outside its directory")
        write_atomic(d / rel, data)
    write_atomic(d / "config.yaml", yaml.safe_dump(cfg, sort_keys=False).encode())
    meta = {k: rec[k] for k in ("overrides", "host", "pid", "phases", "error")}
    write_atomic(d / "sweep.json", (json.dumps(meta, indent=2) + "\n").encode())


def label(overrides: str) -> str:
    """A trial's overrides as the table shows them: without executor and store, the same for
    every trial (the sweep's first line names them; config.yaml and sweep.json keep them)."""
    return " ".join(o for o in overrides.split() if o.lstrip("+~").partition("=")[0].split(".")[0] not in NOT_RESULT)


def spread(points: list[tuple[str, dict]]) -> list[int]:
    """The order trials are submitted in: the first trial of each model, then the second of
    each, ...: trials that share a model (its model and reference phases) then rarely start
    together, so the later ones read those phases from the store instead of computing them
    at the same time. The table keeps the sweep's order."""
    rank, seen = {}, {}
    for i, (_, cfg) in enumerate(points):
        k = phase_key("model", cfg)
        rank[i] = seen[k] = seen.get(k, -1) + 1
    return sorted(range(len(points)), key=lambda i: (rank[i], i))


def _failed(item: tuple, error: str) -> dict:
    return {"index": item[0], "overrides": item[1], "host": None, "pid": None, "phases": {}, "summary": None,
            "error": error, "files": {}}


def dispatch(client, items: list[tuple], gather) -> None:
    """Every trial to `client`'s cluster at once, in `items`' order (the scheduler starts them
    in that order), each gathered as it finishes; no client: one after another here. A trial
    whose worker dies is rerun by the scheduler on another; one that killed
    `distributed.scheduler.allowed-failures` + 1 workers (out of memory?) is an error row, and
    the sweep goes on."""
    with Progress(len(items), "sweep", unit="trials") as prog:
        if client is None:
            for item in items:
                gather(run_trial(item))
                prog.update()
            return
        from distributed import as_completed
        run = uuid.uuid4().hex[:8]
        futures = {client.submit(run_trial, item, key=f"trial-{run}-{item[0]}", pure=False): item for item in items}
        try:
            for fut in as_completed(list(futures), loop=client.loop):
                item = futures.pop(fut)
                try:
                    rec = fut.result()
                except Exception as e:      # KilledWorker; or cancelled (the scheduler restarted)
                    rec = _failed(item, f"{type(e).__name__}: {' '.join(str(e).split())}")
                fut.release()
                gather(rec)
                prog.update()
        finally:
            if futures:
                client.cancel(list(futures))


def sweep(args: list[str], out: Path, *, phase_store: bool = True, trial_threads: int = 1,
          spread_models: bool = True, stream=None) -> tuple[list[dict], str]:
    """Run every point of the sweep; write each trial under `out` as it arrives and the table
    when all are in. Returns the records (by index, without their files) and the table."""
    stream = stream or sys.stdout
    points = expand(args)
    ex_cfg = dict(points[0][1]["executor"])
    ex_cfg["kind"] = DISPATCH[ex_cfg["kind"]]
    remote = ex_cfg["kind"] != "sync"
    inner = None
    if remote:   # on a worker, a trial's fan-out stays in its worker process
        inner = {"kind": "threads", "workers": trial_threads} if trial_threads > 1 else {"kind": "sync"}
    opts = {"phase_store": phase_store, "inner": inner, "code": code_version(SWEEP_CODE)}
    order = spread(points) if spread_models else range(len(points))
    items = [(i, points[i][0], points[i][1], opts) for i in order]

    recs: dict[int, dict] = {}

    def gather(rec):
        i = rec["index"]
        _write_trial(out / str(i), points[i][1], rec)
        recs[i] = rec = {k: v for k, v in rec.items() if k != "files"}
        line = f"error: {rec['error']}" if rec["error"] else headline_line(rec["summary"])
        print(f"[{i}] {label(rec['overrides']) or '-'}: {line}", file=stream, flush=True)

    Store(points[0][1]["store"])        # unwritable: one line now, not one per trial
    ex = Executor(ExecutorConfig.from_dict(ex_cfg))
    try:
        ex.start()
    except OSError as e:
        raise ConfigError(f"executor.address={ex_cfg.get('address')}: cannot reach the scheduler "
                          f"({' '.join(str(e).split()) or type(e).__name__})") from None
    with ex:
        out.mkdir(parents=True, exist_ok=True)
        where = "this process"
        if ex.client is not None:
            where = f"{ex.client.scheduler.address} ({len(ex.client.scheduler_info()['workers'])} workers now)"
        print(f"sweep: {len(items)} trials on {where}; store {points[0][1]['store']}; trials in {out}",
              file=stream, flush=True)
        dispatch(ex.client, items, gather)
    recs = [recs[i] for i in range(len(items))]
    rows = [(label(r["overrides"]), r["summary"] or {"status": "error"}) for r in recs]
    text = table(rows) + "".join(f"\n\ntrial {i}: error: {r['error']}" for i, r in enumerate(recs) if r["error"])
    write_atomic(out / TABLE, (text + "\n").encode())
    done = [p[0] for r in recs for p in r["phases"].values()]
    print(f"\n{text}\n  table: {out / TABLE}\n  phases: {done.count('computed')} computed, "
          f"{done.count('stored')} from the store", file=stream, flush=True)
    return recs, text


HELP = """Run a Hydra sweep with one Dask task per trial; every trial shares one store.

The overrides are those of `python -m pipeline.trial --multirun` (key=a,b, range(a,b), choice(a,b)).
Where trials run: executor=cluster executor.address=tcp://HOST:8786 (a running scheduler),
executor=processes executor.workers=N (a loopback cluster started for the sweep), or
sync/threads (one after another in this process). store=URL must be reachable by every worker.
Each trial's phases (all but report) are stored as they finish: a trial rerun after its worker
died, a second sweep, or a trial sharing a model computes only what is not stored yet.

examples:
  python -m pipeline.sweep executor=processes model=gemm target=tiny model.m=32,64,96,128
  python -m pipeline.sweep executor=cluster executor.address=tcp://10.0.0.5:8786 \\
      store=file:///shared/tessera-store target=ipu21 model.layers=4,16,27 \\
      policy.exchange_table_cap=65536,81920
See docs/cluster.md."""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.sweep", description=HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None,
                    help="the sweep directory (default artifacts/trials/sweep-<date-time>)")
    ap.add_argument("--trial-threads", type=int, default=1,
                    help="fan-out threads inside each trial on a worker (default 1: in the worker's thread)")
    ap.add_argument("--no-phase-store", action="store_true",
                    help="store fan-out items only, not whole phases")
    ap.add_argument("--in-order", action="store_true",
                    help="submit trials in the sweep's order (default: spread trials sharing a model)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides: key=value, key=a,b, group=option")
    ns = ap.parse_args([a for a in argv if a not in ("--multirun", "-m")])
    out = ns.dir or REPO / "artifacts" / "trials" / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        if ns.trial_threads < 1:
            raise ConfigError(f"--trial-threads {ns.trial_threads}: not an integer >= 1")
        recs, _ = sweep(ns.overrides, out, phase_store=not ns.no_phase_store, trial_threads=ns.trial_threads,
                        spread_models=not ns.in_order)
    except (ConfigError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
        return 1 if any(r["error"] for r in recs) else 0


if __name__ == "__main__":
    # run as pipeline.sweep, not __main__: the task function then travels to the workers by
    # name (imported there from the same checkout), not by value as a copy of this script's
    # (this file imported under its name: not an import loop)
    import importlib
    sys.exit(importlib.import_module("pipeline.sweep").main(sys.argv[1:]))

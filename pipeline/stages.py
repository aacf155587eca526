"""Stage entry points: `python -m pipeline <phase>` (what dvc.yaml runs).

A stage reads params.yaml, loads its upstream artifacts, runs the compiler phase
with a mapper that fans out over Dask through the content-addressed store, and
writes artifacts/<phase>/result.npz (data only: pipeline/codec.py), metrics/<phase>.json and the host monitor
files, all atomically. A rejection is a result (exit 0); bad input is a one-line
error (exit 2)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import compiler
from compiler.phases import PHASES, run_phase
from compiler.target import ConfigError

from . import codec
from .config import PARAMS, REPO, load_params
from .fanout import Executor, ExecutorConfig, map_reduce
from .monitor import HostMonitor
from .store import Store, StoreError, digest, task_key
from .trim import Trimmer

ART = REPO / "artifacts"
METRICS = REPO / "metrics"
PLOTS = METRICS / "plots"       # dvc plots data written by the report stage (git-tracked, small)
HOST = METRICS / "host"         # host time/RSS per stage: git-ignored, not a DVC out (they differ every run)
RESULT = "result.npz"           # pipeline/codec.py: JSON + .npy members, nothing that can run code
UNITS = {"expand": "candidates", "place": "tile problems"}   # what the progress line counts
CODE = sorted(str(p) for p in Path(compiler.__file__).parent.rglob("*.py"))  # the compiler's code version


class StageError(Exception):
    """Missing or unreadable upstream artifact, unwritable output: a one-line error."""


def write_atomic(path: Path, data) -> None:
    """Write ``data`` (bytes, or a function writing to a binary file) to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            data(f) if callable(data) else f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _git_index(repo: Path) -> Path | None:
    """The git index of the checkout at `repo` (.git a directory, or a worktree's
    `gitdir: ...` file), None outside git."""
    dot = repo / ".git"
    if dot.is_dir():
        return dot / "index"
    with contextlib.suppress(OSError, ValueError):
        line = dot.read_text().strip()
        if line.startswith("gitdir:"):
            gitdir = Path(line[len("gitdir:"):].strip())
            return (gitdir if gitdir.is_absolute() else repo / gitdir) / "index"
    return None


def write_tracked(path: Path, data: bytes) -> None:
    """write_atomic for a file git tracks (metrics/*.json, metrics/plots/), which git must
    always see as changed when its bytes changed. git (and DVC's own index writes in `dvc
    exp`) trusts an index entry whose size, mtime second and inode match the file, unless
    the entry is racy (mtime not older than the index). DVC deletes a stage's outs before
    running it, so a rewrite can reuse the deleted file's inode: same size, same second,
    same inode -- invisible to `git status` until touched (issue #24). So when the new
    file's mtime second is not later than the index's, it is set to the index's second + 1
    (nanoseconds kept: DVC's hash cache keys on the full mtime): then it differs from every
    mtime the index trusts. Unchanged bytes are not rewritten at all."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    write_atomic(path, data)
    index = _git_index(REPO)
    with contextlib.suppress(OSError):
        idx, st = index.stat().st_mtime_ns if index else None, path.stat()
        if idx is not None and st.st_mtime_ns // 10**9 <= idx // 10**9:
            os.utime(path, ns=(st.st_atime_ns, (idx // 10**9 + 1) * 10**9 + st.st_mtime_ns % 10**9))


def write_json(path: Path, obj) -> None:
    data = (json.dumps(obj, indent=2, sort_keys=True, default=_plain) + "\n").encode()
    (write_atomic if HOST in path.parents else write_tracked)(path, data)


def _plain(o):
    if hasattr(o, "item"):
        return o.item()
    return str(o)


# Phases that read the model's data only piecewise (its graph; the reference, a layer at a
# time; the run's host streams and read-back) load its large arrays from the file when used
# (codec.FileArray): at 27 layers the ~390 MB of weights would otherwise sit beside the run's
# ~940 MB of simulated tile memory, and an eager load reads and CRC-checks them all first.
LAZY_MODEL = {"reference", "plan", "expand", "run", "report"}
LAZY_BYTES = 1 << 20


def load_result(phase: str, lazy: bool = False):
    path = ART / phase / RESULT
    try:
        return codec.load(path, LAZY_BYTES) if lazy else codec.load(path)
    except FileNotFoundError:
        raise StageError(f"missing upstream artifact {path.relative_to(REPO)}: "
                         f"run `dvc repro {phase}` first") from None
    except codec.CodecError as e:
        raise StageError(f"unreadable upstream artifact {path.relative_to(REPO)}: {e}; "
                         f"rerun `dvc repro -f {phase}` (or find who wrote it)") from None
    except OSError as e:
        raise StageError(f"unreadable upstream artifact {path.relative_to(REPO)}: {e.strerror or e}") from None


def save_result(phase: str, res) -> None:
    write_atomic(ART / phase / RESULT, lambda f: codec.dump(res, f))


def make_mapper(executor: Executor, store: Store):
    """The compiler's mapper contract over map_reduce: cached per item by
    (task, compiler code version, digest of the shared inputs, digest of the item)."""
    def mapper(task, fn, items, reduce, init, shared=None, stored=None):
        shared = shared or {}
        base = digest(shared)
        key = lambda item: task_key(task, CODE, [base, digest(item)], {})
        # A fresh result and one read back from the store encode to the same bytes (the codec
        # writes values, not object identities), so a resumed run writes identical artifacts.
        return map_reduce(fn, items, reduce, init, executor=executor, store=store, key=key,
                          label=task, scatter=shared, unit=UNITS.get(task, "items"), store_as=stored)
    return mapper


def outputs_of(phase: str) -> list[Path]:
    """Every file the stage writes (removed again if writing them fails half way)."""
    out = ART / phase
    files = [HOST / f"{phase}.json"]
    if phase == "report":
        return files + [out / "profile.html", METRICS / "trial.json", PLOTS / "supersteps.csv",
                        PLOTS / "tiles.csv", PLOTS / "ops.csv"]
    extra = [out / "output.npz"] if phase == "run" else []      # graph outputs, device and reference
    return files + extra + [out / RESULT, METRICS / f"{phase}.json"]


def priced_choice(cfg: dict, stage: str, key: str, auto: bool, mark: str) -> dict:
    """cfg with a pricing stage's pick (artifacts/STAGE/choice.json) under `key` when the
    trial asks for the choice (`auto`) and the stage wrote a priced one (`mark` in it); the
    phase prices it itself otherwise. model.attention=auto: pipeline/attention.py, handed
    to the model phase; policy.pipeline_groups=auto: pipeline/family.py, to the plan phase."""
    f = ART / stage / "choice.json"
    if not auto or not f.is_file():
        return cfg
    doc = json.loads(f.read_text())
    return {**cfg, key: doc} if mark in doc else cfg


def run_stage(phase: str, params: str | Path | None = None) -> object:
    if phase not in PHASES:
        raise ConfigError(f"unknown phase {phase!r} (one of {', '.join(PHASES)})")
    # everything that can be checked is checked before anything is written
    # the files the model's keys name are checked where they are read (the config and model stages)
    cfg = load_params(params or PARAMS, inputs=phase == "model")
    store = Store(cfg.get("store") or REPO / ".tessera-store")
    ups, _ = PHASES[phase]
    inputs = {u: load_result(u, lazy=u == "model" and phase in LAZY_MODEL) for u in ups}
    if phase == "model":
        from compiler.attn_choice import CHOICE_KEY
        cfg = priced_choice(cfg, "attention", CHOICE_KEY, dict(cfg["model"]).get("attention") == "auto", "cycles")
    if phase == "plan":
        from compiler.family import FAMILY_KEY
        cfg = priced_choice(cfg, "family", FAMILY_KEY, dict(cfg["policy"]).get("pipeline_groups") == "auto",
                            "candidates")
    out = ART / phase
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StageError(f"cannot create {out.relative_to(REPO)}: {e.strerror or e}") from None
    writing = False   # a failure before the writes leaves the previous outputs as they were
    try:
        with HostMonitor(ART / "host" / phase) as mon, Trimmer(), \
                Executor(ExecutorConfig.from_dict(cfg["executor"])) as ex:
            if phase == "report":   # no host figures: profile.html must be byte-identical on a rerun
                from compiler.report import report
                res = report(*(inputs[u] for u in ups), compiler.phases.target_of(cfg))
            else:
                res = run_phase(phase, inputs, cfg, make_mapper(ex, store))
        host = {"elapsed_s": round(mon.elapsed_s, 3), "peak_rss_mib": round(mon.peak_rss_mib, 2)}
        writing = True
        if phase == "report":
            write_atomic(out / "profile.html", res.html.encode())
            for name, text in res.plots.items():
                write_tracked(PLOTS / name, text.encode())
            write_json(METRICS / "trial.json", res.summary)
        else:
            save_result(phase, res)
            if phase == "place":   # policy.place.dump: tile problems for the CLI / other allocators
                shutil.rmtree(out / "dumps", ignore_errors=True)
                files = [("index.txt", "".join(f"{n}\n" for n, _ in res.dumps) or "none\n")]
                for name, text in files + res.dumps:
                    write_atomic(out / "dumps" / name, text.encode())
            if phase == "run":
                write_atomic(out / "output.npz", res.output_npz())
            write_json(METRICS / f"{phase}.json", {phase: res.metrics()})
        write_json(HOST / f"{phase}.json", host)
    except BaseException:
        for f in outputs_of(phase) if writing else ():   # no half-written set of outputs
            with contextlib.suppress(OSError):
                f.unlink(missing_ok=True)
        raise
    rej = getattr(res, "rejection", None)
    if rej and rej.phase == phase:
        from compiler.report import rejection_line
        print(f"{phase}: {rejection_line(rej.metrics() | {'message': rej.message})}", file=sys.stderr)
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

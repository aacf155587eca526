"""Numba's compiled kernels for a queued experiment, from the workspace that queued it.

`dvc exp run --queue` (and `--temp`) runs each experiment in a fresh git checkout under
<workspace>/.dvc/tmp/exps (dvc/repo/experiments/executor/local.py, TempDirExecutor). It holds
tracked files only, so none of the `__pycache__` where numba caches the compiler's kernels
(`njit(cache=True)`), and every source file has the checkout's mtime, while numba keeps a
cache beside its source file and trusts it only for that file's mtime and size. So every
queued experiment compiled every kernel again: ~30 s of a 4-layer trial
(experiments/host_time/README.md, 2026-12-05, later).

`warm` runs first in every stage process (pipeline/__init__.py, before anything imports
numba). In such a checkout, when the package's sources are byte-identical to the workspace's
(a sweep of params, the usual case), it gives each source file the workspace file's mtime and
copies the workspace's numba cache files that the checkout lacks. Numba then judges them as it
judges its own: the source's mtime and size, and in each entry's key the function's bytecode
hash, its signature and the CPU. When any source differs, it copies nothing and numba compiles
as before: one kernel may inline another from a different file, which numba's per-file check
would not see. The files come from the workspace numba itself wrote them in; numba loads them
there too. Stdlib only: importing the compiler here would import numba before the mtimes are
set (numba reads a source's stamp when a kernel is decorated)."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

PACKAGES = ("compiler",)          # where the kernels are (`grep -rl njit compiler pipeline`)
CACHE_FILES = ("*.nbi", "*.nbc")  # numba's index and data files


def queued_from(repo: Path) -> Path | None:
    """The workspace whose DVC temporary checkout `repo` is (.dvc/tmp/exps/tmpX for a queued
    experiment, .dvc/tmp/exps/standalone/tmpX for `--temp`), or None."""
    p = repo.resolve()
    for dvc_dir in p.parents[2:4]:
        if dvc_dir.name == ".dvc" and p.relative_to(dvc_dir).parts[:2] == ("tmp", "exps") \
                and (dvc_dir.parent / "dvc.yaml").is_file():
            return dvc_dir.parent
    return None


def _sources(root: Path, packages) -> dict[str, Path]:
    return {str(f.relative_to(root)): f for pkg in packages for f in sorted((root / pkg).rglob("*.py"))
            if "__pycache__" not in f.parts}


def warm(repo: Path, packages=PACKAGES) -> int:
    """Copy the queuing workspace's numba cache into the checkout at `repo` (see the module
    docstring); returns how many files were copied (0 outside a queued checkout, or when a
    source differs). A file that cannot be read or written is left to numba to compile."""
    ws = queued_from(repo)
    if ws is None:
        return 0
    ours, theirs = _sources(repo, packages), _sources(ws, packages)
    try:
        if ours.keys() != theirs.keys() or any(ours[k].read_bytes() != theirs[k].read_bytes() for k in ours):
            return 0
    except OSError:
        return 0
    copied = 0
    for k, src in theirs.items():
        dst = ours[k]
        with contextlib.suppress(OSError):
            st = src.stat()
            if dst.stat().st_mtime_ns != st.st_mtime_ns:
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    for d in {f.parent for f in theirs.values()}:
        cache = d / "__pycache__"
        files = [f for pat in CACHE_FILES for f in cache.glob(pat)]
        if not files:
            continue
        out = repo / d.relative_to(ws) / "__pycache__"
        for f in files:
            if (out / f.name).exists():      # numba's own, or an earlier stage's copy
                continue
            with contextlib.suppress(OSError):
                out.mkdir(exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{f.name}.")
                os.close(fd)
                try:
                    shutil.copyfile(f, tmp)
                    os.replace(tmp, out / f.name)    # whole or not at all, as numba writes them
                    copied += 1
                finally:
                    Path(tmp).unlink(missing_ok=True)
    return copied

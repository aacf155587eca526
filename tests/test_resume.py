"""Hard to lose work, at the stage level (`python -m pipeline expand`, what dvc runs):

- a stage SIGKILLed mid fan-out leaves no partial outputs, and the next run resumes
  from the store, recomputes only the unfinished candidates and writes a result
  byte-identical to an uninterrupted run;
- corrupted and truncated store entries are detected, recomputed, and the result is
  unchanged;
- under executor=processes, a worker process killed mid-task is replaced, its task
  retried, and the stage completes with the same result.

The workload is the GEMM 512x1152x1152 on ipu21 with many plan candidates so expand
fans out long enough to be interrupted."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from test_dvc import copy_repo, sh

N = 48          # candidates expanded (threads)
N_PROC = 16     # candidates expanded under executor=processes (a few ms of overhead each)


def set_params(d: Path, **over) -> None:
    p = yaml.safe_load((d / "params.yaml").read_text())
    for k, v in over.items():
        grp, _, key = k.partition(".")
        if key:
            p[grp][key] = v
        else:
            p[grp] = v
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def entries(store: Path) -> int:
    return sum(1 for f in store.glob("*/*") if not f.name.startswith("."))


def stage(d: Path, phase: str, **kw):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               TESSERA_PROGRESS_INTERVAL="0.5")
    return subprocess.Popen([sys.executable, "-m", "pipeline", phase], cwd=d, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def finish(p) -> str:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return err


def counts(err: str, n: int) -> tuple[int, int]:
    """(done, cached) from the final progress line `expand: n/n candidates in ..., (k cached)`."""
    m = re.search(rf"expand: {n}/{n} candidates in [^\n]*?(?:\((\d+) cached\))?$", err, re.M)
    assert m, err
    return n, int(m.group(1) or 0)


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    d = copy_repo(tmp_path_factory.mktemp("resume") / "t")
    ipu = yaml.safe_load((d / "conf" / "target" / "ipu21.yaml").read_text())
    p = yaml.safe_load((d / "params.yaml").read_text())
    p["model"].update(m=512, k=1152, n=1152)
    # homes only: expand then runs exactly N candidates (stationary would add copies, ring homes
    # their plain-homes twin)
    set_params(d, target=ipu, model=p["model"], **{"policy.plan_candidates": N, "policy.weight_stationary": False,
                                                   "policy.ring_homes": False, "store": ".store-ref"})
    for ph in ("model", "plan"):
        sh([sys.executable, "-m", "pipeline", ph], d)
    finish(stage(d, "expand"))                       # the uninterrupted reference
    ref = (d / "artifacts" / "expand" / "result.npz").read_bytes()
    return d, ref


def test_sigkill_mid_fanout_resumes_from_store(trial):
    d, ref = trial
    res = d / "artifacts" / "expand" / "result.npz"
    res.unlink()
    (d / "metrics" / "expand.json").unlink()
    set_params(d, store=".store-kill")
    store = d / ".store-kill"
    p = stage(d, "expand")
    t0 = time.time()
    while entries(store) < N // 4 if store.exists() else True:
        assert p.poll() is None, "expand finished before it could be killed"
        assert time.time() - t0 < 120
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    assert p.returncode == -signal.SIGKILL
    done = entries(store)
    assert N // 4 <= done < N, done
    assert not res.exists() and not (d / "metrics" / "expand.json").exists()   # nothing partial
    err = finish(stage(d, "expand"))
    total, cached = counts(err, N)
    assert cached == done, err                       # recomputed only N - done candidates
    assert entries(store) == N
    assert res.read_bytes() == ref                   # byte-identical to the uninterrupted run
    print(f"\nresume: killed after {done}/{N} candidates; resumed run recomputed {N - cached}, "
          f"reused {cached}; result.npz byte-identical ({len(ref)} B)")


def test_corrupt_and_truncated_entries_are_recomputed(trial):
    d, ref = trial
    set_params(d, store=".store-ref")
    files = sorted(f for f in (d / ".store-ref").glob("*/*") if not f.name.startswith("."))
    assert len(files) >= 3
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])                              # truncated
    b = bytearray(files[1].read_bytes()); b[-10] ^= 0xFF; files[1].write_bytes(bytes(b))   # bit flip
    files[2].write_bytes(b"garbage")                                          # not an entry at all
    err = finish(stage(d, "expand"))
    assert err.count("is corrupt") == 3, err
    _, cached = counts(err, N)
    assert cached == N - 3
    assert (d / "artifacts" / "expand" / "result.npz").read_bytes() == ref


def _workers(pid: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [k for k in kids if "spawn_main" in " ".join(k.cmdline())]


def test_dead_worker_is_retried_under_processes(trial, tmp_path):
    d, _ = trial
    set_params(d, **{"policy.plan_candidates": N_PROC, "store": ".store-proc"})
    sh([sys.executable, "-m", "pipeline", "plan"], d)
    set_params(d, store=".store-ref2")
    finish(stage(d, "expand"))                         # reference for N_PROC (threads: same result, faster)
    ref = (d / "artifacts" / "expand" / "result.npz").read_bytes()
    set_params(d, **{"executor.kind": "processes", "executor.temp_dir": str(tmp_path), "store": ".store-proc"})
    store = d / ".store-proc"
    p = stage(d, "expand")
    t0 = time.time()
    while not (store.exists() and entries(store) >= 2):
        assert p.poll() is None, "expand finished before a worker could be killed"
        assert time.time() - t0 < 120
        time.sleep(0.02)
    workers = _workers(p.pid)
    assert workers, "no worker processes found"
    victim = workers[0]
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert entries(store) < N_PROC
    err = finish(p)
    _, cached = counts(err, N_PROC)
    assert cached == 0
    assert (d / "artifacts" / "expand" / "result.npz").read_bytes() == ref

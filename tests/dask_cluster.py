"""A real dask.distributed cluster for tests: a scheduler and workers started as
separate processes on loopback (random port, no dashboard, dirs in tmp_path)."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path


@contextlib.contextmanager
def local_cluster(tmp_path: Path, env: dict, cwd: Path, workers: int = 2):
    """Yields the scheduler address; tears every process down (bounded waits)."""
    dask_bin = Path(sys.executable).with_name("dask")
    sched_file = tmp_path / "scheduler.json"
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    env = {**env, "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
    procs = []
    try:
        procs.append(subprocess.Popen(
            [str(dask_bin), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(sched_file)],
            env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=open(logs / "scheduler.log", "w")))
        for w in range(workers):
            (tmp_path / f"w{w}").mkdir(exist_ok=True)
            procs.append(subprocess.Popen(
                [str(dask_bin), "worker", "--scheduler-file", str(sched_file), "--nthreads", "1",
                 "--no-dashboard", "--host", "127.0.0.1", "--local-directory", str(tmp_path / f"w{w}"),
                 "--name", f"w{w}"],
                env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=open(logs / f"w{w}.log", "w")))
        deadline = time.monotonic() + 30
        while not (sched_file.exists() and sched_file.stat().st_size > 0):
            assert time.monotonic() < deadline, "scheduler did not start"
            assert procs[0].poll() is None, (logs / "scheduler.log").read_text()
            time.sleep(0.1)
        yield json.loads(sched_file.read_text())["address"]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)

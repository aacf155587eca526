"""pipeline.fanout (and pipeline.progress): bounded map_reduce over sync/threads/processes/cluster."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pipeline.fanout import (  # noqa: E402
    Executor, ExecutorConfig, collect_by_index, map_reduce, top_k_reducer,
)
from pipeline.progress import Progress  # noqa: E402
from pipeline.store import Store, digest, task_key  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dask_cluster import local_cluster  # noqa: E402

HERE = Path(__file__).resolve().parent

N_ITEMS = 40


@pytest.fixture(autouse=True)
def dask_tmp(tmp_path, monkeypatch):
    d = tmp_path / "dask-tmp"
    d.mkdir()
    monkeypatch.setenv("DASK_TEMPORARY_DIRECTORY", str(d))
    return d


@pytest.fixture(scope="module")
def proc_ex(tmp_path_factory):
    """One 2-worker processes cluster shared by the tests that do not need a fresh one."""
    d = tmp_path_factory.mktemp("dask-shared")
    with Executor(ExecutorConfig(kind="processes", workers=2, temp_dir=str(d))) as ex:
        yield ex
    assert not list(d.iterdir())  # closed and cleaned


def executor_for(kind, proc_ex, **kw):
    return proc_ex if kind == "processes" else ExecutorConfig(kind=kind, **kw)


def _env():
    # Tasks defined here travel by reference (module test_fanout): worker processes must import
    # both pipeline and this module. (LocalCluster workers inherit sys.path through spawn.)
    path = [str(REPO), str(HERE), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}


# ---------------------------------------------------------------------------------------- tasks

def score_task(item):
    # many ties in score; jittered duration shuffles arrival order
    time.sleep(((item * 7) % 5) * 0.002)
    return {"item": item, "score": (item * 37) % 7}


def with_shared(item, table=None, bias=0):
    return float(table[item % len(table)]) + bias


def flaky_marker(item, marker_dir=None):
    """Raises on the first attempt of each item (marker file), succeeds on the retry."""
    m = Path(marker_dir) / f"flaky-{item}"
    if not m.exists():
        m.write_text("x")
        raise RuntimeError(f"transient failure {item}")
    return item * 10


def always_fails(item):
    raise ValueError(f"bad item {item}")


def dies_once(item, marker_dir=None):
    """The worker process dies (os._exit) on the first attempt of item 3."""
    if item == 3:
        m = Path(marker_dir) / "died"
        if not m.exists():
            m.write_text("x")
            os._exit(1)
    time.sleep(0.01)
    return item * item


def counted_square(item, calls_dir=None):
    Path(calls_dir, f"{item}-{os.getpid()}-{time.monotonic_ns()}").write_text("")
    return item * item


def expected_topk(k):
    res = [{"item": i, "score": (i * 37) % 7} for i in range(N_ITEMS)]
    ranked = sorted(((r["score"], i, r) for i, r in enumerate(res)), key=lambda e: (e[0], e[1]))
    return ranked[:k]


# ---------------------------------------------------------------------------------------- config

def test_executor_config_from_dict():
    c = ExecutorConfig.from_dict({"kind": "processes", "workers": 3})
    assert (c.kind, c.workers, c.window, c.retries, c.address) == ("processes", 3, 6, 2, None)
    assert ExecutorConfig.from_dict(None).kind == "threads"
    assert ExecutorConfig.from_dict({"kind": "sync", "window": 1}).window == 1
    with pytest.raises(ValueError, match=r"^executor.kind: 'foo' is not one of sync\|threads\|processes\|cluster$"):
        ExecutorConfig.from_dict({"kind": "foo"})
    with pytest.raises(ValueError, match=r"executor: unknown key 'wokers'"):
        ExecutorConfig.from_dict({"wokers": 2})
    with pytest.raises(ValueError, match=r"executor.workers: 0"):
        ExecutorConfig.from_dict({"workers": 0})
    with pytest.raises(ValueError, match=r"executor.window: 'x'"):
        ExecutorConfig.from_dict({"window": "x"})
    with pytest.raises(ValueError, match=r"executor.retries: -1"):
        ExecutorConfig.from_dict({"retries": -1})
    with pytest.raises(ValueError, match=r"executor.address: required"):
        ExecutorConfig.from_dict({"kind": "cluster"})


def test_top_k_reducer_is_order_independent():
    import random

    red = top_k_reducer(5, score=lambda r: r["score"])
    pairs = [(i, {"score": (i * 37) % 7}) for i in range(50)]
    outs = set()
    for seed in range(20):
        random.Random(seed).shuffle(pairs)
        acc = []
        for i, r in pairs:
            acc = red(acc, i, r)
        outs.add(tuple((s, i) for s, i, _ in acc))
    assert len(outs) == 1
    assert list(outs)[0] == tuple(sorted(((i * 37) % 7, i) for i in range(50))[:5])
    big = top_k_reducer(2, score=lambda r: r, largest=True)
    acc = None
    for i, v in enumerate([1.0, float("nan"), 3.0, 3.0]):
        acc = big(acc, i, v)
    assert [(s, i) for s, i, _ in acc] == [(3.0, 2), (3.0, 3)]


# ---------------------------------------------------------------------------------------- determinism

def test_identical_across_executors_and_windows(proc_ex):
    want = [(s, i) for s, i, _ in expected_topk(6)]
    seen = {}
    for kind in ("sync", "threads", "processes"):
        with contextlib.ExitStack() as stack:
            ex = proc_ex if kind == "processes" else stack.enter_context(Executor({"kind": kind}))
            for window in (1, 2, 8):
                acc = map_reduce(score_task, range(N_ITEMS), top_k_reducer(6, lambda r: r["score"]), [],
                                 executor=ex, window=window, label=f"det-{kind}-{window}")
                seen[(kind, window)] = [(s, i, r["item"]) for s, i, r in acc]
    assert all(v == seen[("sync", 1)] for v in seen.values()), seen
    assert [(s, i) for s, i, _ in seen[("sync", 1)]] == want


def test_generator_items_and_collect():
    gen = (i for i in range(25))
    out = map_reduce(lambda x: x + 1, gen, collect_by_index, None, executor={"kind": "threads", "window": 3})
    assert out == {i: i + 1 for i in range(25)}


def test_scatter_threads_and_processes(proc_ex):
    table = np.arange(1000, dtype=np.float64)
    want = sum(float(table[i % 1000]) + 0.5 for i in range(30))
    for kind in ("threads", "processes"):
        got = map_reduce(with_shared, range(30), lambda acc, i, r: acc + r, 0.0,
                         executor=executor_for(kind, proc_ex), scatter={"table": table, "bias": 0.5})
        assert got == want


def test_back_to_back_scatters_of_one_name(proc_ex):
    """Each map_reduce scatters its "table" anew right after the last one released it (a pod runs
    its chips this way). With the name as the Dask key, a scatter raced the release before it and
    a task waited forever on a forgotten key (about one run in three of tests/pipeline/
    test_pod_workers.py hung CI for 90 min); so one call a value, each must see its own."""
    for k in range(25):
        table = np.full(20_000, float(k))
        got = map_reduce(with_shared, range(2), lambda acc, i, r: acc + [r], [],
                         executor=proc_ex, scatter={"table": table, "bias": 0.0})
        assert got == [float(k), float(k)], k


# ---------------------------------------------------------------------------------------- failures

@pytest.mark.parametrize("kind", ["sync", "threads"])
def test_retries_in_process(tmp_path, kind):
    out = map_reduce(flaky_marker, range(6), collect_by_index, None,
                     executor={"kind": kind, "retries": 1}, scatter={"marker_dir": str(tmp_path)})
    assert out == {i: i * 10 for i in range(6)}


@pytest.mark.parametrize("kind", ["sync", "threads", "processes"])
def test_errors_propagate_after_retries(kind, proc_ex):
    with pytest.raises(ValueError, match="bad item"):
        map_reduce(always_fails, range(4), collect_by_index, None, executor=executor_for(kind, proc_ex, retries=1))


@pytest.mark.parametrize("kind", ["sync", "threads", "processes"])
def test_window_bounds_items_in_flight(kind, proc_ex):
    """Items are pulled lazily: never more than `window` taken but not yet reduced."""
    taken = [0]
    worst = [0]

    def items():
        for i in range(30):
            taken[0] += 1
            worst[0] = max(worst[0], taken[0] - len(acc_seen))
            yield i

    acc_seen = set()

    def red(acc, i, r):
        acc_seen.add(i)
        return acc + r["score"]

    total = map_reduce(score_task, items(), red, 0, window=3, progress=False,
                       executor=executor_for(kind, proc_ex))
    assert total == sum((i * 37) % 7 for i in range(30))
    assert len(acc_seen) == 30 and 1 <= worst[0] <= 3


def test_worker_death_is_retried_processes(tmp_path):
    # a fresh cluster from an ExecutorConfig: also checks start-up and clean shutdown
    cfg = ExecutorConfig.from_dict({"kind": "processes", "workers": 2, "temp_dir": str(tmp_path / "dask")})
    out = map_reduce(dies_once, range(8), collect_by_index, None, executor=cfg,
                     scatter={"marker_dir": str(tmp_path)}, label="dies")
    assert (tmp_path / "died").exists()  # the worker really died once
    assert out == {i: i * i for i in range(8)}
    assert not list((tmp_path / "dask").iterdir())


def test_lost_futures_and_scattered_inputs_are_recovered(proc_ex):
    """All workers restart mid-run (all in-flight tasks and the scattered table are lost)."""
    table = np.arange(100, dtype=np.float64)
    restarted = []

    def red(acc, i, r):
        if not restarted:
            restarted.append(1)
            proc_ex.client.restart(timeout=60)
        acc[i] = r
        return acc

    out = map_reduce(with_shared, range(12), red, {}, executor=proc_ex, window=4,
                     scatter={"table": table, "bias": 1.0})
    assert restarted and out == {i: float(i) + 1.0 for i in range(12)}


# ---------------------------------------------------------------------------------------- store / resume

def test_store_skips_cached_items(tmp_path):
    store = Store(tmp_path / "store")
    calls = tmp_path / "calls"
    calls.mkdir()

    def key(item):
        return task_key("sq", [], [digest(item)], {})

    red = top_k_reducer(3, score=lambda r: -r)
    a = map_reduce(counted_square, range(10), red, [], executor={"kind": "threads"}, store=store, key=key,
                   scatter={"calls_dir": str(calls)})
    assert len(list(calls.iterdir())) == 10 and len(store.keys()) == 10
    store.delete(key(4))
    red = top_k_reducer(3, score=lambda r: -r)
    b = map_reduce(counted_square, range(10), red, [], executor={"kind": "sync"}, store=store, key=key,
                   scatter={"calls_dir": str(calls)})
    assert len(list(calls.iterdir())) == 11 and a == b


RESUME_SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    from pipeline.fanout import map_reduce, top_k_reducer
    from pipeline.store import Store, task_key, digest

    def work(item, calls_dir=None, delay=0.0):
        Path(calls_dir, f"{item}-{os.getpid()}-{time.monotonic_ns()}").write_text("")
        time.sleep(delay)
        return {"item": item, "score": (item * 37) % 7}

    if __name__ == "__main__":
        root, delay, out = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
        store = Store(root / "store")
        acc = map_reduce(work, range(30), top_k_reducer(5, lambda r: r["score"]), [],
                         executor={"kind": "threads", "workers": 2}, store=store,
                         key=lambda i: task_key("resume-work", [], [digest(i)], {"n": 30}),
                         scatter={"calls_dir": str(root / "calls"), "delay": delay}, label="resume")
        Path(out).write_text(json.dumps([[s, i, r["item"]] for s, i, r in acc]))
''')


def test_resume_after_sigkill(tmp_path):
    script = tmp_path / "resume_child.py"
    script.write_text(RESUME_SCRIPT)
    (tmp_path / "calls").mkdir()
    store_dir = tmp_path / "store"
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path), "0.25", str(tmp_path / "killed.json")],
                             env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if store_dir.exists() and len(list(store_dir.rglob("*.tsr"))) >= 8:
                break
            assert child.poll() is None, "child finished before it could be killed"
            time.sleep(0.02)
        else:
            pytest.fail("child did not store results in time")
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert child.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed.json").exists()
    stored = len(Store(store_dir).keys())
    assert 8 <= stored < 30
    calls_before = len(list((tmp_path / "calls").iterdir()))

    r = subprocess.run([sys.executable, str(script), str(tmp_path), "0", str(tmp_path / "resumed.json")],
                       env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    recomputed = len(list((tmp_path / "calls").iterdir())) - calls_before
    assert recomputed == 30 - stored
    assert "cached" in r.stderr  # progress's final line reports the reused items

    # identical to an uninterrupted run
    fresh = tmp_path / "fresh"
    (fresh / "calls").mkdir(parents=True)
    subprocess.run([sys.executable, str(script), str(fresh), "0", str(fresh / "out.json")], env=_env(),
                   check=True, capture_output=True, timeout=60)
    assert json.loads((tmp_path / "resumed.json").read_text()) == json.loads((fresh / "out.json").read_text())


# ---------------------------------------------------------------------------------------- cluster

def test_cluster_executor_with_shared_store(tmp_path):
    env = {**_env()}
    with local_cluster(tmp_path, env, tmp_path) as address:

        from distributed import Client

        with Client(address, set_as_default=False, timeout="20s") as c:
            c.wait_for_workers(2, timeout=30)
            workers = {str(pid) for pid in c.run(os.getpid).values()}

        store = Store(f"file://{tmp_path / 'shared-store'}")
        calls = tmp_path / "calls"
        calls.mkdir()
        cfg = {"kind": "cluster", "address": address, "window": 4}

        def key(i):
            return task_key("cluster-sq", [], [digest(i)], {})

        out = map_reduce(counted_square, range(20), collect_by_index, None, executor=cfg, store=store,
                         key=key, scatter={"calls_dir": str(calls)}, label="cluster")
        assert out == {i: i * i for i in range(20)}
        pids = {p.name.split("-")[1] for p in calls.iterdir()}
        # every call ran once, on the cluster's workers (not here); which of them is the
        # scheduler's choice: in one suite run it gave all 20 to one worker, 50 ms tasks or not
        assert len(list(calls.iterdir())) == 20 and pids <= workers and str(os.getpid()) not in pids
        # second run: everything comes from the shared store
        out2 = map_reduce(counted_square, range(20), collect_by_index, None, executor=cfg, store=store, key=key,
                          scatter={"calls_dir": str(calls)})
        assert out2 == out and len(list(calls.iterdir())) == 20
# ---------------------------------------------------------------------------------------- progress

def test_progress_log_lines_when_not_a_tty():
    buf = io.StringIO()
    with Progress(40, "expand", unit="candidates", interval=0.0, stream=buf, tty=False) as p:
        p.update(cached=True)
        for _ in range(11):
            time.sleep(0.001)
            p.update()
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("expand: 1/40 candidates, ")
    assert lines[-2].startswith("expand: 12/40 candidates, ") and "/s, ETA " in lines[-2]
    assert lines[-1].startswith("expand: 12/40 candidates in ") and lines[-1].endswith("(1 cached)")


def test_progress_rate_limited():
    buf = io.StringIO()
    with Progress(1000, "x", interval=60, stream=buf, tty=False) as p:
        for _ in range(1000):
            p.update()
    assert len(buf.getvalue().splitlines()) == 1  # only the final line


def test_progress_tqdm_when_tty():
    buf = io.StringIO()
    with Progress(5, "place", unit="tiles", stream=buf, tty=True) as p:
        for _ in range(5):
            p.update()
    assert "place" in buf.getvalue() and "5/5" in buf.getvalue()

"""Bounded fan-out over Dask, with results reduced as they arrive.

    cfg = ExecutorConfig.from_dict({"kind": "processes", "workers": 2})
    red = top_k_reducer(8, score=lambda r: r.cost)
    best = map_reduce(evaluate, candidates, red, [], executor=cfg, store=store,
                      key=lambda c: task_key("evaluate", [...], [digest(c)], cfg_keys),
                      label="expand", unit="candidates", scatter={"program": program})

``map_reduce(fn, items, reduce, init, *, executor, store=None, key=None, label="",
scatter=None)`` computes ``fn(item, **scatter)`` for every item with at most ``window`` tasks
in flight and folds each result into the accumulator as it arrives:
``acc = reduce(acc, index, result)`` (``index`` = position of the item in ``items``). Items
are consumed lazily (a generator is fine), results are released once reduced, so memory is
O(window + what the reducer keeps).

Determinism. Results arrive in an order that depends on the executor, the window and timing.
**Reducers must be order-independent**: the final accumulator must not depend on the order of
the (index, result) calls. Break ties by ``index``, never by arrival. ``top_k_reducer(k, score)``
keeps the k best by ``(score, index)`` and gives an identical result for any
window/executor/arrival order; ``collect_by_index`` keeps everything in a dict by index.

Store. With ``store`` and ``key(item) -> str``, an item whose key is in the store is reduced
from the stored value and not submitted; every computed result is ``put`` into the store as
soon as it arrives. A stage that is killed (even SIGKILL) therefore resumes by recomputing only
the unfinished items. Stored results must be data (``pipeline/codec.py``: numbers, strings,
containers, numpy arrays, the compiler's result dataclasses); a store entry never holds code.

Executors (``ExecutorConfig.kind``):

* ``sync`` -- in-process loop (debugging, profiling; no parallelism).
* ``threads`` -- a ``concurrent.futures.ThreadPoolExecutor`` of ``workers`` threads (what
  dask's threaded scheduler uses underneath; ~tens of microseconds per task, no start-up cost).
  Good for work that releases the GIL (numpy, OR-tools).
* ``processes`` -- ``distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
  processes=True)``, dashboard off, logs silenced, worker ``local_directory`` and
  ``DASK_TEMPORARY_DIRECTORY`` in a fresh directory under ``temp_dir`` (default:
  ``$DASK_TEMPORARY_DIRECTORY`` or ``<repo>/dask-worker-space``), removed on close.
  Start-up ~1-2.5 s, a few ms per task: make tasks >= 100 ms or chunk them.
* ``cluster`` -- ``distributed.Client(address)`` to an existing scheduler (not shut down).

On the Dask executors, tasks are submitted with ``retries=`` so an exception is retried, and a
worker process that dies mid-task (segfault, OOM kill, ``os._exit``) has its task rescheduled
on a restarted worker (up to ``distributed.scheduler.allowed-failures``, default 3). The sync
and threads executors retry exceptions ``retries`` times too. Large shared inputs go in
``scatter={"name": value}``: they are scattered once (``client.scatter(..., broadcast=True)``)
and passed to every call as keyword arguments (never pickled into each task's closure). The
clusters this module starts run without the Active Memory Manager, which would otherwise drop
the broadcast replicas down to one. If a future is still lost (every replica of a scattered
input died, or the cluster restarted), the inputs are scattered again and the item resubmitted.

Worker processes re-import the main module: scripts that use ``processes`` must guard their
entry point with ``if __name__ == "__main__":``. ``fn`` must be picklable by cloudpickle
(module-level functions of importable modules are sent by reference; the workers must be able
to import them -- the same checkout / PYTHONPATH). Tasks, scattered inputs and results travel
between client and workers in memory with Dask's own (pickle) serialisation: trusted transport
inside one cluster, never read back from a file of ours.

To reuse one cluster for several ``map_reduce`` calls, open a session:
``with Executor(cfg) as ex: map_reduce(..., executor=ex)``.

Generic: nothing from ``compiler/``.
"""
from __future__ import annotations

import bisect
import concurrent.futures as cf
import contextlib
import dataclasses
import itertools
import logging
import math
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .progress import Progress
from .store import MISSING, Store

__all__ = ["ExecutorConfig", "Executor", "map_reduce", "top_k_reducer", "collect_by_index", "KINDS"]

log = logging.getLogger(__name__)

KINDS = ("sync", "threads", "processes", "cluster")
REPO_ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------

def _int_field(name: str, v: Any, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            v = int(v)
        else:
            raise ValueError(f"executor.{name}: {v!r} is not an integer >= {minimum}")
    if v < minimum:
        raise ValueError(f"executor.{name}: {v!r} is not an integer >= {minimum}")
    return v


@dataclasses.dataclass
class ExecutorConfig:
    """How ``map_reduce`` fans out. ``window`` defaults to 2 x ``workers``."""

    kind: str = "threads"
    workers: int = 2
    window: int | None = None
    address: str | None = None
    retries: int = 2
    temp_dir: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"executor.kind: {self.kind!r} is not one of {'|'.join(KINDS)}")
        self.workers = _int_field("workers", self.workers, 1)
        self.window = 2 * self.workers if self.window is None else _int_field("window", self.window, 1)
        self.retries = _int_field("retries", self.retries, 0)
        if self.address is not None and not isinstance(self.address, str):
            raise ValueError(f"executor.address: {self.address!r} is not a string")
        if self.kind == "cluster" and not self.address:
            raise ValueError("executor.address: required when executor.kind is 'cluster'")
        if self.temp_dir is not None:
            self.temp_dir = os.fspath(self.temp_dir)

    @classmethod
    def from_dict(cls, d: Any = None) -> "ExecutorConfig":
        """From a dict / mapping (e.g. the ``executor`` group of params.yaml)."""
        if d is None:
            return cls()
        if isinstance(d, ExecutorConfig):
            return d
        if not hasattr(d, "items"):
            raise ValueError(f"executor: expected a mapping, got {type(d).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        d = dict(d.items())
        for k in d:
            if k not in known:
                raise ValueError(f"executor: unknown key {k!r} (known: {', '.join(known)})")
        return cls(**d)


# --------------------------------------------------------------------------------------------
# Executor sessions
# --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


class Executor:
    """An open executor (thread pool, local cluster or client); reusable across map_reduce."""

    def __init__(self, config: ExecutorConfig | dict | None = None):
        self.config = ExecutorConfig.from_dict(config)
        self.client = None
        self.cluster = None
        self.pool: cf.ThreadPoolExecutor | None = None
        self.temp_dir: str | None = None
        self._open = False
        self._log_levels: dict[str, int] = {}

    @property
    def kind(self) -> str:
        return self.config.kind

    def start(self) -> "Executor":
        if self._open:
            return self
        cfg = self.config
        t0 = time.perf_counter()
        if cfg.kind in ("processes", "cluster"):
            import distributed  # noqa: F401  (configures its loggers on import: do that first)

            # distributed logs every worker start/stop at INFO; keep warnings (e.g. a worker died)
            for name in ("distributed", "distributed.nanny", "distributed.scheduler", "distributed.worker",
                         "distributed.core", "distributed.http.proxy"):
                lg = logging.getLogger(name)
                self._log_levels[name] = lg.level
                if lg.getEffectiveLevel() < logging.WARNING:
                    lg.setLevel(logging.WARNING)
        if cfg.kind == "threads":
            self.pool = cf.ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="tessera-fanout")
        elif cfg.kind == "processes":
            self._start_local_cluster()
        elif cfg.kind == "cluster":
            from distributed import Client

            self.client = Client(cfg.address, set_as_default=False, timeout="30s")
        self._open = True
        if cfg.kind in ("processes", "cluster"):
            log.info("fanout: %s executor ready in %.2fs", cfg.kind, time.perf_counter() - t0)
        return self

    def _start_local_cluster(self) -> None:
        import dask
        from distributed import Client, LocalCluster

        cfg = self.config
        base = cfg.temp_dir or os.environ.get("DASK_TEMPORARY_DIRECTORY") or str(REPO_ROOT / "dask-worker-space")
        os.makedirs(base, exist_ok=True)
        self.temp_dir = tempfile.mkdtemp(prefix="tessera-dask-", dir=base)
        try:
            # The Active Memory Manager would drop the broadcast replicas of scattered inputs
            # down to one (then a worker death loses them): off for the clusters we own.
            with dask.config.set({"temporary-directory": self.temp_dir,
                                  "distributed.scheduler.active-memory-manager.start": False}), \
                    _env("DASK_TEMPORARY_DIRECTORY", self.temp_dir):
                self.cluster = LocalCluster(
                    n_workers=cfg.workers, threads_per_worker=1, processes=True,
                    host="127.0.0.1", dashboard_address=None, local_directory=self.temp_dir,
                    silence_logs=logging.ERROR,
                    # no dashboard; its bare HTTP server on a random local port, not :8787
                    scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                )
                self.client = Client(self.cluster, set_as_default=False)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close(timeout=10)
            self.client = None
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close(timeout=20)
            self.cluster = None
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None
        for name, level in self._log_levels.items():
            logging.getLogger(name).setLevel(level)
        self._log_levels.clear()
        self._open = False

    def __enter__(self) -> "Executor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# Reducers
# --------------------------------------------------------------------------------------------

def top_k_reducer(k: int, score: Callable[[Any], Any], *, largest: bool = False):
    """A reducer keeping the ``k`` best results by ``(score(result), index)``.

    Best = smallest score (a cost), or largest with ``largest=True``; NaN scores rank last;
    equal scores are broken by the item index, so the kept set and its order are identical
    for any window, executor or arrival order. The accumulator (pass ``init=[]`` or ``None``)
    is a list of ``(score, index, result)`` sorted best first.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k_reducer: k must be a positive integer, got {k!r}")

    def rank(entry):
        s, i, _ = entry
        nan = isinstance(s, float) and math.isnan(s)
        return (nan, 0 if nan else (-s if largest else s), i)

    def reduce(acc, index, result):
        acc = [] if acc is None else acc
        entry = (score(result), index, result)
        if len(acc) >= k and rank(entry) >= rank(acc[-1]):
            return acc
        bisect.insort(acc, entry, key=rank)
        del acc[k:]
        return acc

    reduce.k = k  # type: ignore[attr-defined]
    return reduce


def collect_by_index(acc, index, result):
    """A reducer keeping every result: ``{index: result}`` (``init={}`` or ``None``)."""
    acc = {} if acc is None else acc
    acc[index] = result
    return acc


# --------------------------------------------------------------------------------------------
# map_reduce
# --------------------------------------------------------------------------------------------

def _call(fn, item, kwargs, retries: int, label: str, index: int):
    for attempt in itertools.count():
        try:
            return fn(item, **kwargs)
        except Exception as e:
            if attempt >= retries:
                raise
            log.warning("%s: item %d failed (%s: %s); retry %d/%d", label, index,
                        type(e).__name__, e, attempt + 1, retries)


def _run_sync(ex: Executor, fn, pending: Iterator, deliver, scatter: dict, label: str, window: int) -> None:
    for i, item, k in pending:
        deliver(i, k, _call(fn, item, scatter, ex.config.retries, label, i))


def _run_threads(ex: Executor, fn, pending: Iterator, deliver, scatter: dict, label: str, window: int) -> None:
    pool = ex.pool
    retries = ex.config.retries
    inflight: dict[cf.Future, tuple[int, Any, Any, int]] = {}

    def fill():
        while len(inflight) < window:
            nxt = next(pending, None)
            if nxt is None:
                return
            i, item, k = nxt
            inflight[pool.submit(fn, item, **scatter)] = (i, item, k, 0)

    try:
        fill()
        while inflight:
            done, _ = cf.wait(inflight, return_when=cf.FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: inflight[f][0]):
                i, item, k, attempt = inflight.pop(f)
                e = f.exception()
                if e is not None:
                    if attempt >= retries:
                        raise e
                    log.warning("%s: item %d failed (%s: %s); retry %d/%d", label, i,
                                type(e).__name__, e, attempt + 1, retries)
                    inflight[pool.submit(fn, item, **scatter)] = (i, item, k, attempt + 1)
                else:
                    deliver(i, k, f.result())
            fill()
    finally:
        for f in inflight:
            f.cancel()


MAX_LOSSES = 3  # times one item may be lost (worker deaths, lost inputs) beyond dask's own retries


def _run_dask(ex: Executor, fn, pending: Iterator, deliver, scatter: dict, label: str, window: int) -> None:
    """Bounded window over a distributed Client.

    Exceptions are retried by dask (``retries=``); a task whose worker dies is rescheduled by
    the scheduler. If a future is nevertheless cancelled or lost -- e.g. every replica of a
    scattered input died with its worker, or the cluster was restarted -- the shared inputs
    are scattered again if they are gone and the item is resubmitted (at most MAX_LOSSES times).
    """
    from concurrent.futures import CancelledError

    from distributed import as_completed

    client = ex.client
    retries = ex.config.retries
    prefix = "".join(c if c.isalnum() or c in "_-" else "_" for c in label) or "task"
    run = uuid.uuid4().hex[:8]
    seq = itertools.count()
    shared: dict[str, Any] = {}
    ac = as_completed(loop=client.loop)
    inflight: dict[str, list] = {}  # key -> [future, index, item, store key, losses]

    def ensure_scattered() -> None:
        if scatter and (not shared or any(f.status != "finished" for f in shared.values())):
            if shared:
                log.warning("%s: shared inputs %s were lost; scattering them again", label, sorted(scatter))
                for f in shared.values():
                    with contextlib.suppress(Exception):
                        f.release()
            shared.clear()
            # Keys unique to this scatter: a dict scattered as it is takes its names as keys, and
            # the next map_reduce's scatter of "model" raced the release of this one's, which
            # left its task waiting forever on a key the scheduler had just forgotten.
            keys = {n: f"{prefix}-{run}-{n}-{next(seq)}" for n in scatter}
            futs = client.scatter({keys[n]: v for n, v in scatter.items()}, broadcast=True, hash=False)
            shared.update({n: futs[keys[n]] for n in scatter})

    def submit(i, item, k, losses=0):
        fut = client.submit(fn, item, **shared, key=f"{prefix}-{run}-{i}-{next(seq)}", pure=False,
                            retries=retries)
        inflight[fut.key] = [fut, i, item, k, losses]
        ac.add(fut)

    def fill():
        while len(inflight) < window:
            nxt = next(pending, None)
            if nxt is None:
                return
            submit(*nxt)

    def lost(fut) -> None:
        _, i, item, k, losses = inflight.pop(fut.key)
        fut.release()
        if losses >= MAX_LOSSES:
            raise RuntimeError(f"{label}: item {i} was lost {losses + 1} times (workers dying, or the "
                               f"cluster restarted); giving up")
        log.warning("%s: item %d was lost (%s); resubmitting", label, i, fut.status)
        ensure_scattered()
        submit(i, item, k, losses + 1)

    ensure_scattered()
    try:
        fill()
        for batch in ac.batches():
            batch = [f for f in batch if f.key in inflight and inflight[f.key][0] is f]
            done = [f for f in batch if f.status == "finished"]
            try:
                results = client.gather(done) if done else []
            except CancelledError:  # lost between the status check and the gather
                results = None
            if results is None:
                done, results = [], []
                for f in batch:
                    if f.status == "finished":
                        try:
                            results.append(f.result())
                            done.append(f)
                        except CancelledError:
                            pass
            for fut, res in sorted(zip(done, results), key=lambda fr: inflight[fr[0].key][1]):
                _, i, _, k, _ = inflight.pop(fut.key)
                deliver(i, k, res)
                fut.release()
            del results
            for fut in sorted((f for f in batch if f.key in inflight), key=lambda f: inflight[f.key][1]):
                if fut.status == "error":
                    fut.result()  # raises the task's exception (dask's retries are exhausted)
                lost(fut)
            fill()
    finally:
        if inflight:
            with contextlib.suppress(Exception):
                client.cancel([e[0] for e in inflight.values()])
        for f in shared.values():
            with contextlib.suppress(Exception):
                f.release()


_RUNNERS = {"sync": _run_sync, "threads": _run_threads, "processes": _run_dask, "cluster": _run_dask}


def map_reduce(fn: Callable[..., Any], items: Iterable[Any], reduce: Callable[[Any, int, Any], Any],
               init: Any, *, executor: ExecutorConfig | Executor | dict, store: Store | None = None,
               key: Callable[[Any], str] | None = None, label: str = "", scatter: dict | None = None,
               unit: str = "items", progress: bool = True, window: int | None = None,
               store_as: Callable[[Any], Any] | None = None) -> Any:
    """Fold ``reduce(acc, index, fn(item, **scatter))`` over ``items``; see the module docstring.

    At most ``executor.window`` tasks (or ``window``, if given) are in flight. With ``store``
    and ``key``, stored results are reused and new ones stored as they arrive: each whole, or
    ``store_as(result)`` (``reduce`` is then handed that for an item read back). Returns the
    final accumulator.
    """
    if (store is None) != (key is None):
        raise ValueError("map_reduce: store and key must be given together")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"map_reduce: window must be a positive integer, got {window!r}")
    total = len(items) if hasattr(items, "__len__") else None  # type: ignore[arg-type]
    label = label or getattr(fn, "__name__", "map")
    scatter = dict(scatter or {})
    acc = init
    n_cached = n_computed = 0
    t0 = time.perf_counter()

    with contextlib.ExitStack() as stack:
        if isinstance(executor, Executor):
            ex = executor
            if not ex._open:
                stack.enter_context(ex)
        else:
            ex = stack.enter_context(Executor(ExecutorConfig.from_dict(executor)))
        prog = stack.enter_context(Progress(total, label, unit=unit, enabled=progress))

        def pending():
            nonlocal acc, n_cached
            for i, item in enumerate(items):
                k = None
                if store is not None:
                    k = key(item)  # type: ignore[misc]
                    v = store.get(k)
                    if v is not MISSING:
                        acc = reduce(acc, i, v)
                        n_cached += 1
                        prog.update(cached=True)
                        continue
                yield i, item, k

        def deliver(i, k, result):
            nonlocal acc, n_computed
            if k is not None:
                store.put(k, result if store_as is None else store_as(result))  # type: ignore[union-attr]
            acc = reduce(acc, i, result)
            n_computed += 1
            prog.update()

        gen = pending()
        try:
            _RUNNERS[ex.kind](ex, fn, gen, deliver, scatter, label, window or ex.config.window)
        except BaseException:
            prog.enabled = False    # no "n/n done" line after a failure: the error is the last word
            raise
        finally:
            gen.close()

    log.info("%s: %d %s (%d computed, %d cached) in %.2fs on %s", label, n_cached + n_computed,
             unit, n_computed, n_cached, time.perf_counter() - t0, ex.kind)
    return acc

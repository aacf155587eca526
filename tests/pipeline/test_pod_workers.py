"""Each chip of a pod simulated as its own task on a Dask worker process (pipeline's mapper,
executor=processes): the same figures and outputs, byte for byte, as the in-process run, and
every chip's run stored in the content-addressed store (a rerun recomputes nothing)."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler import mapper as mappers  # noqa: E402
from compiler.phases import compile_trial, policy_of, target_of  # noqa: E402
from compiler.pod import pod_of  # noqa: E402
from compiler.pod.run import pod_run  # noqa: E402
from pipeline import codec  # noqa: E402
from pipeline.fanout import Executor, ExecutorConfig  # noqa: E402
from pipeline.stages import make_mapper  # noqa: E402
from pipeline.store import Store  # noqa: E402
from test_pod import cfg  # noqa: E402

# processes: each chip a task on a worker process (what executor=processes|cluster does); the
# first run in a checkout also compiles the simulator's numba kernels in each worker
KIND = "processes"


def test_chips_on_worker_processes(tmp_path):
    c = cfg()
    c["model"]["layers"] = 2
    r = compile_trial(c)
    assert r["run"].validated, r["run"].failed
    args = (r["lower"], r["model"], r["reference"], target_of(c), policy_of(c), pod_of(c["target"]))
    store = Store(str(tmp_path / "store"))
    with Executor(ExecutorConfig(kind=KIND, workers=2, temp_dir=str(tmp_path))) as ex:
        mp = make_mapper(ex, store)
        got = pod_run(*args, mp)
        entries = sorted(p.name for p in (tmp_path / "store").rglob("*") if p.is_file())
        again = pod_run(*args, mp)      # from the store
    want = pod_run(*args, mappers.serial)
    assert got.validated and got.metrics() == want.metrics() == again.metrics()
    for n in want.outputs:
        assert np.array_equal(got.outputs[n], want.outputs[n])
    assert len([e for e in entries if e.endswith(".tsr")]) >= 2       # one entry per chip's run
    # the pod's phase results are data the stages can write and read back (pipeline/codec.py)
    for name in ("plan", "place", "lower", "run"):
        back = codec.loads(codec.dumps(r[name]))
        assert type(back) is type(r[name]) and back.metrics() == r[name].metrics(), name

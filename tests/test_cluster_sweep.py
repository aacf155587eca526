"""`python -m pipeline.sweep` (pipeline/sweep.py): a Hydra sweep dispatched trial by trial to
a Dask cluster sharing one store.

The cluster test starts a loopback LocalCluster of 2 worker processes, runs a sweep of 8 tiny
GEMM trials against it from the command line, and SIGKILLs the worker running one trial when it
is about to compute that trial's expand phase (model, reference and plan stored). A worker
plugin counts every phase computation in a ledger file (written by the workers, restarted ones
included): the sweep must finish with every trial written, every phase of the sweep computed
exactly once across the kill, the killed trial rerun from its stored phases on a live worker,
and its results equal to a fresh in-process trial's."""
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import dask
import pytest
from distributed import Client, LocalCluster, WorkerPlugin

from compiler.target import ConfigError
from pipeline import sweep as sw
from pipeline.config import compose
from pipeline.trial import trial

REPO = Path(__file__).resolve().parent.parent
SWEEP = ["model=gemm", "target=tiny", "model.m=32,48,64,80", "policy.exchange_table_cap=65536,16"]
HOLD_PHASE = "expand"


class Ledger(WorkerPlugin):
    """On every worker (restarted ones too): each phase computation appends `phase key pid` to
    the ledger once computed; the first worker to reach HOLD_PHASE writes its pid and the
    phase's key to `hold` and sleeps there, so the test kills it mid-trial, its earlier phases
    already stored."""

    def __init__(self, ledger: str, hold: str):
        self.ledger, self.hold = ledger, hold

    def setup(self, worker):
        import pipeline.sweep as mod
        real, ledger, hold = mod.compute_phase, self.ledger, self.hold

        def counted(key, name, res, cfg, mapper):
            if name == HOLD_PHASE:
                try:                        # the first worker here, once per sweep
                    os.close(os.open(hold + ".claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    pass
                else:
                    with open(hold + ".tmp", "w") as f:
                        f.write(json.dumps({"pid": os.getpid(), "key": key}))
                    os.replace(hold + ".tmp", hold)
                    time.sleep(30)          # killed here; if not, the asserts below fail
            v = real(key, name, res, cfg, mapper)
            with open(ledger, "a") as f:
                f.write(f"{name} {key} {os.getpid()}\n")
            return v

        mod.compute_phase = counted


def _records(out: Path, n: int) -> list[dict]:
    return [json.loads((out / str(i) / "sweep.json").read_text()) for i in range(n)]


def test_sweep_on_a_cluster_survives_a_killed_worker(tmp_path):
    out, store, ledger, hold = tmp_path / "sweep", tmp_path / "store", tmp_path / "ledger", tmp_path / "hold"
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with dask.config.set({"temporary-directory": str(tmp_path / "dask")}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address=None, local_directory=str(tmp_path / "dask"),
                         scheduler_kwargs={"dashboard": False}) as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.register_plugin(Ledger(str(ledger), str(hold)), name="ledger")
        cmd = [sys.executable, "-m", "pipeline.sweep", "--dir", str(out), "executor=cluster",
               f"executor.address={cluster.scheduler_address}", f"store={store}", *SWEEP]
        with open(tmp_path / "stdout", "w") as so, open(tmp_path / "stderr", "w") as se:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=so, stderr=se)
            try:
                deadline = time.monotonic() + 90
                while not hold.exists():
                    assert proc.poll() is None, (tmp_path / "stderr").read_text()
                    assert time.monotonic() < deadline, "no trial reached the hold"
                    time.sleep(0.05)
                held = json.loads(hold.read_text())
                os.kill(held["pid"], signal.SIGKILL)      # the worker process, mid-trial
                rc = proc.wait(120)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    stdout = (tmp_path / "stdout").read_text()
    print(stdout)                                         # the table
    assert rc == 0, (tmp_path / "stderr").read_text()

    # nothing lost: all 8 trials written, in the table, in the sweep's order
    rows = [r for r in (out / "trials.md").read_text().splitlines() if r.startswith("| ") and r[2].isdigit()]
    assert len(rows) == 8 and [r.split(" | ")[0] for r in rows] == [f"| {i}" for i in range(8)]
    assert [r.split(" | ")[2] for r in rows] == ["ok", "rejected"] * 4, rows
    assert rows[0] in stdout
    recs = _records(out, 8)
    for i, rec in enumerate(recs):
        assert rec["error"] is None and (out / str(i) / "summary.json").is_file()
        assert (out / str(i) / "output.npz").is_file() == (i % 2 == 0)

    # the killed trial was rerun on a live worker from its stored model, reference and plan
    killed = [i for i, r in enumerate(recs) if r["phases"][HOLD_PHASE][1] == held["key"]]
    assert len(killed) == 1, held
    k = killed[0]
    assert recs[k]["pid"] != held["pid"] and all(r["pid"] != held["pid"] for r in recs)
    assert {p: s for p, (s, _) in recs[k]["phases"].items()} == {
        "model": "stored", "reference": "stored", "plan": "stored", "expand": "computed",
        "place": "computed", "schedule": "computed", "lower": "computed", "run": "computed"}

    # nothing computed twice: every phase key of the sweep computed exactly once, the killed
    # worker's three included; 4 models (each shared by 2 trials) and 8 x 6 later phases
    lines = [ln.split() for ln in ledger.read_text().splitlines()]
    counts = collections.Counter(key for _, key, _ in lines)
    keys = {key for r in recs for _, key in r["phases"].values()}
    assert max(counts.values()) == 1 and set(counts) == keys and len(keys) == 4 * 2 + 8 * 6, counts
    assert sorted(name for name, _, pid in lines if int(pid) == held["pid"]) == ["model", "plan", "reference"]
    computed = [key for r in recs for s, key in r["phases"].values() if s == "computed"]
    assert len(computed) + 3 == len(lines) and "phases: 53 computed, 11 from the store" in stdout

    # reused phases give the trial a fresh one would have: summary and outputs, byte for byte
    cfg = sw.expand(recs[k]["overrides"].split())[0][1]
    cfg["store"], cfg["executor"] = str(tmp_path / "fresh-store"), {**cfg["executor"], "kind": "sync", "address": None}
    fresh = trial(cfg, tmp_path / "fresh")
    swept = json.loads((out / str(k) / "summary.json").read_text())
    assert {p: v for p, v in fresh.items() if p != "host"} == {p: v for p, v in swept.items() if p != "host"}
    assert (tmp_path / "fresh" / "output.npz").read_bytes() == (out / str(k) / "output.npz").read_bytes()


def test_phase_keys_name_what_a_phase_reads(tmp_path):
    base = compose(["model=gemm", "target=tiny"])
    other_policy = compose(["model=gemm", "target=tiny", "policy.exchange_table_cap=16", "executor=sync"])
    other_model = compose(["model=gemm", "target=tiny", "model.m=48"])
    for p in ("model", "reference"):     # the model group alone
        assert sw.phase_key(p, base) == sw.phase_key(p, other_policy) != sw.phase_key(p, other_model)
    for p in ("plan", "expand", "run"):  # everything but where and how it runs
        assert sw.phase_key(p, base) != sw.phase_key(p, other_policy)
        assert sw.phase_key(p, base) == sw.phase_key(p, {**base, "store": "elsewhere", "executor": {}})
    assert len({sw.phase_key(p, base) for p in ("model", "reference", "plan")}) == 3
    # a model's input file by content, not by path
    vit = compose(["model=vit"])
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    a.write_bytes(b"one")
    b.write_bytes(b"one")
    ka, kb = (sw.phase_key("model", {**vit, "model": {**vit["model"], "input": str(p)}}) for p in (a, b))
    assert ka == kb
    b.write_bytes(b"two")
    assert sw.phase_key("model", {**vit, "model": {**vit["model"], "input": str(b)}}) != ka


def test_trials_sharing_a_model_are_submitted_apart():
    points = [(f"m={m} cap={c}", compose(["model=gemm", "target=tiny", f"model.m={m}",
                                          f"policy.exchange_table_cap={c}"]))
              for m in (32, 48) for c in (65536, 16, 8)]
    assert sw.spread(points) == [0, 3, 1, 4, 2, 5]
    assert sw.label("executor=cluster executor.address=tcp://h:1 store=/s model.m=32 +experiment=x") == \
        "model.m=32 +experiment=x"


def test_sweep_in_process_shares_and_reuses_phases(tmp_path, capsys):
    args = ["executor=sync", f"store={tmp_path / 'store'}", "model=gemm", "target=tiny", "model.m=32,48",
            "policy.exchange_table_cap=65536,16"]
    recs, text = sw.sweep(args, tmp_path / "a")
    states = [{p: s for p, (s, _) in r["phases"].items()} for r in recs]
    # submitted spread (m=32 cap 64K, m=48 cap 64K, then the two cap=16): the second trial of
    # each model reads its model and reference phases from the store
    assert [s["model"] for s in states] == ["computed", "stored", "computed", "stored"]
    assert [s["reference"] for s in states] == ["computed", "stored", "computed", "stored"]
    assert all(s["plan"] == "computed" for s in states)
    assert "phases: 28 computed, 4 from the store" in capsys.readouterr().out
    recs2, text2 = sw.sweep(args, tmp_path / "b")      # again: nothing computed
    assert all(s == "stored" for r in recs2 for s, _ in r["phases"].values())
    cut = lambda t: [row.split(" | ")[:10] for row in t.splitlines()]    # up to min free B: not host s
    assert cut(text) == cut(text2)
    for i in range(4):
        assert (tmp_path / "a" / str(i) / "summary.json").is_file()
        assert (tmp_path / "a" / str(i) / "config.yaml").is_file()
    assert (tmp_path / "a" / "0" / "output.npz").read_bytes() == (tmp_path / "b" / "0" / "output.npz").read_bytes()


def test_trials_started_together_compute_their_model_once(tmp_path):
    """One model, two workers: both trials start at once, so spreading cannot keep them apart;
    one computes the model and reference phases while the other waits and reads them back."""
    args = ["executor=processes", "executor.workers=2", f"store={tmp_path / 'store'}", "model=gemm",
            "target=tiny", "model.m=32", "policy.exchange_table_cap=65536,16"]
    recs, _ = sw.sweep(args, tmp_path / "s")
    for phase in ("model", "reference"):
        assert sorted(r["phases"][phase][0] for r in recs) == ["computed", "stored"], (phase, recs)


@pytest.mark.parametrize("args, message", [
    (["model=gemm", "target=tiny", "executor.workers=1,2"], "executor must be the same for every trial"),
    (["model=gemm", "target=tiny", "hydra.sweep.dir=x"], "Hydra's own keys do not apply"),
    (["model=gemm", "target=tiny", "model.m=32,nope"], "model.m"),
])
def test_sweep_bad_input_is_one_line(args, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        sw.sweep(args, tmp_path / "s")
    assert not (tmp_path / "s").exists()



class Crash(WorkerPlugin):
    """Every attempt of a trial with model.m == M dies (os._exit) computing its plan phase."""

    def __init__(self, m: int):
        self.m = m

    def setup(self, worker):
        import pipeline.sweep as mod
        real, m = mod.compute_phase, self.m

        def crashing(key, name, res, cfg, mapper):
            if name == "plan" and cfg["model"]["m"] == m:
                os._exit(1)
            return real(key, name, res, cfg, mapper)

        mod.compute_phase = crashing


def test_a_trial_that_kills_its_workers_is_an_error_row(tmp_path, capsys):
    """distributed.scheduler.allowed-failures exhausted (here 0: the first death) for one trial:
    its row says KilledWorker, the others run, the sweep ends normally."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # worker-saturation 1.0: the scheduler hands a worker one trial at a time (the others wait
    # queued there), so the death counts against the crashing trial alone
    with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                          "distributed.scheduler.worker-saturation": 1.0,
                          "temporary-directory": str(tmp_path / "dask")}), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address=None, local_directory=str(tmp_path / "dask"),
                         scheduler_kwargs={"dashboard": False}) as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.register_plugin(Crash(96), name="crash")
        recs, text = sw.sweep(["executor=cluster", f"executor.address={cluster.scheduler_address}",
                               f"store={tmp_path / 'store'}", "model=gemm", "target=tiny", "model.m=32,96,48"],
                              tmp_path / "s")
    assert recs[1]["error"].startswith("KilledWorker") and recs[1]["summary"] is None
    assert [r["error"] for r in recs[::2]] == [None, None] and [r["summary"]["status"] for r in recs[::2]] == ["ok"] * 2
    rows = [r for r in text.splitlines()[2:] if r.startswith("| ")]
    assert "\n\ntrial 1: error: KilledWorker" in text and "trial 0" not in text
    assert [r.split(" | ")[1:3] for r in rows] == [["model=gemm target=tiny model.m=32", "ok"],
                                                   ["model=gemm target=tiny model.m=96", "error"],
                                                   ["model=gemm target=tiny model.m=48", "ok"]]
    assert "[1] model=gemm target=tiny model.m=96: error: KilledWorker" in capsys.readouterr().out
    assert json.loads((tmp_path / "s" / "1" / "sweep.json").read_text())["error"].startswith("KilledWorker")


def test_a_worker_with_other_code_runs_nothing(tmp_path):
    cfg = sw.expand(["model=gemm", "target=tiny", f"store={tmp_path / 'store'}"])[0][1]
    rec = sw.run_trial((0, "model=gemm", cfg, {"code": "0" * 64, "inner": None, "phase_store": True}))
    assert rec["summary"] is None and rec["phases"] == {} and rec["error"].startswith("worker ")
    assert "runs other code than the sweep's checkout" in rec["error"]
    assert not (tmp_path / "store").exists()
    bad = {**rec, "files": {"../escape.txt": b"x"}}
    with pytest.raises(ValueError, match="outside its directory"):
        sw._write_trial(tmp_path / "t", cfg, bad)
    assert not (tmp_path / "escape.txt").exists()

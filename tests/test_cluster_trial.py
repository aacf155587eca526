"""executor=cluster at the trial level: a dask scheduler and two workers started as
separate processes on loopback, every stage of the default trial connecting to the
scheduler by address, with the store on a shared fsspec URL (file://). The trial
validates, the fan-out tasks ran on the cluster, and a rerun of expand is served
entirely from the shared store."""
import json
import os
import re
import sys

import yaml

from compiler.phases import PHASES
from dask_cluster import local_cluster
from test_dvc import copy_repo, sh



def test_trial_on_an_existing_cluster_with_shared_store(tmp_path):
    d = copy_repo(tmp_path / "t")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(d), os.environ.get("PYTHONPATH")]))}
    with local_cluster(tmp_path, env, d) as address:
        assert address.startswith("tcp://127.0.0.1:")

        from distributed import Client
        with Client(address, set_as_default=False, timeout="20s") as c:
            c.wait_for_workers(2, timeout=30)

        shared = f"file://{tmp_path / 'shared-store'}"
        p = yaml.safe_load((d / "params.yaml").read_text())
        p["executor"].update(kind="cluster", address=address)
        p["store"] = shared
        p["policy"]["plan_candidates"] = 12
        (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
        for phase in PHASES:
            sh([sys.executable, "-m", "pipeline", phase], d)
        trial = json.loads((d / "metrics" / "trial.json").read_text())
        run = json.loads((d / "metrics" / "run.json").read_text())["run"]
        assert trial["status"] == "ok" and run["validated"], (trial, run)

        with Client(address, set_as_default=False, timeout="20s") as c:
            prefixes = c.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
            workers = c.run(os.getpid)
        assert {"expand", "place"} <= set(prefixes), prefixes     # the fan-out ran on the cluster
        assert len(workers) == 2 and os.getpid() not in workers.values()
        entries = list((tmp_path / "shared-store").glob("*/*.tsr"))
        assert len(entries) >= 12

        r = sh([sys.executable, "-m", "pipeline", "expand"], d)   # a rerun: all from the shared store
        m = re.search(r"expand: (\d+)/(\d+) candidates in .*\((\d+) cached\)", r.stderr)
        assert m and int(m[1]) == int(m[2]) == int(m[3]) >= 12, r.stderr   # 12 planned (+ stationary copies)

"""The users' loop, end to end in a temporary git repository on the tiny target:
dvc repro; a two-point sweep queued with `dvc exp run --queue -S` and run with
--run-all, read back from `dvc exp show` (one point fits, the other is rejected by
the exchange-table cap: a failed trial is a row, not a crash); `dvc metrics diff`
and `dvc params diff` between two commits show the stable names of docs/architecture.md §6; `dvc plots`
finds its data; conf/experiment presets compose."""
import csv
import io
import json

import pytest
import yaml

from conftest import REPO
from test_dvc import dvc_repo, sh

SHOW = ("dvc exp show --csv --drop '.*' --keep "
        "'Experiment|State|status|rejected.reason|run.cycles|expand.exchange_table_max_bytes|policy.exchange_table_cap'")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    d = dvc_repo(tmp_path_factory.mktemp("exp") / "trial")
    sh("dvc repro -q && git add -A && git commit -qm 'default trial'", d)
    return d


def test_queued_two_point_sweep_exp_show_and_diffs(repo):
    q = sh("dvc exp run --queue -S 'policy.exchange_table_cap=65536,16'", repo)
    assert q.stdout.count("Queued experiment") == 2
    sh("dvc exp run --run-all -j 1", repo)
    rows = list(csv.DictReader(io.StringIO(sh(SHOW, repo).stdout)))
    exps = {r["policy.exchange_table_cap"]: r for r in rows if r["Experiment"]}
    assert set(exps) == {"65536", "16"}, rows
    assert all(r["State"] == "Success" for r in exps.values())
    ok, rej = exps["65536"], exps["16"]
    assert ok["status"] == "ok" and int(ok["run.cycles"]) > 0
    assert int(ok["expand.exchange_table_max_bytes"]) > 16
    assert rej["status"] == "rejected" and rej["rejected.reason"] == "exchange_table_cap"

    # experiments are commits: diff main against them by the stable names of docs/architecture.md §6
    md = json.loads(sh(f"dvc metrics diff main {ok['Experiment']} --all --json", repo).stdout)
    names = {k for per_file in md.values() for k in per_file}
    for k in ["status", "plan.candidates", "expand.finalists", "expand.exchange_table_max_bytes",
              "expand.code_max_bytes", "place.tiles.greedy", "place.tiles.search", "place.tiles.failed",
              "place.min_free_bytes", "run.cycles", "run.ms", "run.max_abs_error", "run.tolerance",
              "run.validated", "cycles", "cycles_per_layer", "max_abs_error", "min_free_bytes"]:
        assert k in names, (k, sorted(names))
    md = json.loads(sh(f"dvc metrics diff main {rej['Experiment']} --json", repo).stdout)
    t = md["metrics/trial.json"]
    assert t["status"]["old"] == "ok" and t["status"]["new"] == "rejected"
    assert t["rejected.phase"]["new"] == "expand" and t["rejected.deficit_bytes"]["new"] > 0
    pd = json.loads(sh(f"dvc params diff main {rej['Experiment']} --json", repo).stdout)
    assert {k: pd["params.yaml"]["policy.exchange_table_cap"][k] for k in ("old", "new")} == \
        {"old": 81920, "new": 16}
    plots = sh("dvc plots show --json", repo).stdout
    assert "metrics/plots/supersteps.csv" in plots and "metrics/plots/tiles.csv" in plots


def test_experiment_presets_compose():
    from pipeline.config import compose
    assert compose(["+experiment=cap_64k"])["policy"]["exchange_table_cap"] == 65536
    assert compose(["+experiment=cap_80k"])["policy"]["exchange_table_cap"] == 81920
    for n in (1, 4, 16, 27):
        assert compose([f"+experiment=layers_{n}"])["model"]["layers"] == n
    if not (REPO / "conf" / "model" / "vit.yaml").exists():
        pytest.skip("full_depth needs conf/model/vit.yaml (not there yet)")
    c = compose(["+experiment=full_depth"])
    assert c["model"]["layers"] == 27 and c["target"]["name"] == "ipu21"


def test_params_yaml_presets_documented():
    text = (REPO / "README.md").read_text()
    for name in sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml")):
        assert name in text, f"conf/experiment/{name}.yaml is not in README"
    yaml.safe_load((REPO / "params.yaml").read_text())

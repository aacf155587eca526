"""expand through a caching mapper (pipeline/stages.py make_mapper over a store): each
candidate is stored without its tile graph (compiler/expand/__init__.py without_graph), and a
run that reads every candidate back expands its finalists again: the same result, byte for
byte, as the run that computed them."""
from __future__ import annotations

import os

from compiler.phases import run_phase
from pipeline import codec
from pipeline.fanout import Executor, ExecutorConfig
from pipeline.stages import make_mapper
from pipeline.store import Store
from test_batch_plans import _cfg


def test_stored_candidates_hold_no_tile_graph_and_read_back_to_the_same_result(tmp_path):
    cfg = _cfg({}, layers=2, width=128, hidden=512)
    res = {"model": run_phase("model", {}, cfg)}
    res["plan"] = run_phase("plan", res, cfg)
    store = Store(tmp_path / "store")
    out = []
    for _ in range(2):                      # computed, then every candidate read back
        with Executor(ExecutorConfig.from_dict({"kind": "sync"})) as ex:
            out.append(run_phase("expand", res, cfg, make_mapper(ex, store)))
    first, again = out
    assert first.finalists and all(e.tilegraph is not None for e in again.finalists)
    assert codec.dumps(first) == codec.dumps(again)
    entries = [store.get(k) for k in store.keys()]
    assert 0 < len(entries) <= first.screened and all(e.tilegraph is None for e in entries)
    assert max(os.path.getsize(store.path(k)) for k in store.keys()) < 2e6

"""The run stage reads the model's data from its artifact when used (pipeline.codec
FileArray: the host streams when host_in asks, the read-back one member at a time): the
same outputs, cycles and checks as with the data in memory, and a planted wrong weight
byte in the file is still caught, op by op and end to end."""
from __future__ import annotations

import numpy as np

from compiler.phases import compile_trial, target_of
from compiler.run import run
from helpers import target_cfg
from pipeline import codec
from pipeline.codec import FileArray

VIT = dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=2)


def test_run_on_file_arrays_equals_in_memory(tmp_path):
    cfg = dict(model=VIT, target=target_cfg("tiny"), policy={"check": "all"})
    r = compile_trial(cfg)
    path = tmp_path / "model.npz"
    path.write_bytes(codec.dumps(r["model"]))
    lazy = codec.load(path, lazy_bytes=1)
    assert any(isinstance(v, FileArray) for v in lazy.data.values())
    a = run(r["lower"], r["model"], target_of(cfg), "all", ref=r["reference"])
    b = run(r["lower"], lazy, target_of(cfg), "all", ref=r["reference"])
    assert a.validated and b.metrics() == a.metrics()
    for n in a.outputs:
        assert a.outputs[n].tobytes() == b.outputs[n].tobytes()
    assert a.output_npz() == b.output_npz()

    # a wrong byte in one layer's weights on its way to the tiles: the read-back, reading
    # the true weights from the file one member at a time, catches the op that reads it
    name = next(n for n, v in lazy.data.items() if isinstance(v, FileArray) and v.ndim == 3)
    wrong = np.ascontiguousarray(lazy.data[name]).copy()
    wrong.view(np.uint8)[1, 0, 3] ^= 0x40
    res = run(r["lower"], lazy, target_of(cfg), "all", ref=r["reference"], streams={name: wrong})
    assert not res.validated and res.metrics()["ops_failed"] > 0
    assert res.metrics()["first_failed_op"]["iteration"] == 1

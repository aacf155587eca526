"""Element orders: FP8 weights live in AMP micro-panel order (plan/homes.py), the host
sends them rearranged, gathers move whole panel spans, and the simulator's MATMUL reads
FP8 b only as panels. Row-major FP8 homes would need byte-wise permutations: rejected
before placement, with the weight named."""
import dataclasses

import numpy as np
import pytest

from compiler.phases import compile_trial, model_phase, target_of
from compiler.plan.homes import home_blocks, panel_weights
from compiler.plan.matmul import enumerate_grids
from compiler.run import run
from compiler.target import Target
from helpers import cfg, target_cfg

MLP = dict(model=dict(name="mlp", tokens=24, width=32, hidden=80), target=target_cfg("tiny"))


def trial(policy=None, model=None):
    return compile_trial({**MLP, "model": model or MLP["model"], "policy": policy or {}})


@pytest.fixture(scope="module")
def mlp():
    return trial({"weight_stationary": False})


def _weight_transfers(tg, name):
    names = np.asarray(tg.names)[tg.req["name"][tg.xfer["sreq"]]]
    return {k: v[names == name] for k, v in tg.xfer.items()}


def test_fp8_weights_move_as_whole_panel_spans(mlp):
    """fc2 is [80, 32]: two full panels of 32 rows and a partial one of 16."""
    assert mlp["run"].validated
    tg = mlp["place"].tilegraph
    prog = mlp["lower"].program
    assert prog.in_panels == {"fc1": (32, 80, 1, 32), "fc2": (80, 32, 1, 32)}
    for w, cols in (("fc1", 80), ("fc2", 32)):
        x = _weight_transfers(tg, f"{w}.home")
        assert len(x["src"])
        # every span is whole panel columns: a multiple of 32 bytes, or of 16 in fc2's last panel
        assert (x["s_row_bytes"] % 16 == 0).all() and (x["s_row_bytes"] == x["d_row_bytes"]).all()
        assert ((x["s_row_bytes"] % 32 == 0) | (w == "fc2")).all()


def test_host_rearrangement_is_what_makes_it_right(mlp):
    """Injected fault: the same program with the host sending the weights as stored
    (no rearrangement) computes garbage, so the panel order really is read."""
    lo = mlp["lower"]
    bad = dataclasses.replace(lo, program=dataclasses.replace(lo.program, in_panels={}))
    res = run(bad, model_phase({**MLP, "policy": {}}), target_of(MLP), ref=mlp["reference"])
    assert not res.validated and res.max_abs_error > 10 * res.tolerance


def test_resident_weights_are_block_major_panels():
    r = trial()
    assert r["run"].validated
    assert "weights.resident" in r["place"].tilegraph.names, "the tiny MLP keeps its weights resident"
    assert set(r["lower"].program.in_panels) == {"fc1", "fc2"}


def test_row_major_fp8_homes_are_rejected_as_byte_permutations():
    r = trial({"panel_homes": False, "weight_stationary": False})
    rej = r["plan"].rejection
    assert (rej.phase, rej.reason) == ("plan", "unencodable")
    assert "fc1" in rej.message and "byte-wise" in rej.message
    # without the beam (rank-aligned grids) expand meets it: rejected before placement
    r = trial({"panel_homes": False, "weight_stationary": False, "plan_beam": 0})
    rej = r["expand"].rejection
    assert (rej.phase, rej.reason) == ("expand", "unencodable")
    assert "fc1.home" in rej.message and "single elements of 1 B" in rej.message


def test_f16_weights_stay_row_major():
    m = model_phase({**MLP, "model": {**MLP["model"], "weight_dtype": "f16"}, "policy": {}})
    assert panel_weights(m.graph, target_of(MLP)) == {}


def test_panel_b_frees_fp8_block_widths():
    """FP8 b blocks no longer need word-wide n blocks (n = 40 over 4 tiles: nb = 10)
    but need k blocks of whole panels."""
    t = Target.from_dict(target_cfg("tiny"))
    e = enumerate_grids(1, 24, 64, 40, "fp8", "fp8", False, t, panel=32)
    assert 10 in e["nb"] and set(np.unique(e["kb"])) <= {32, 64}
    r = compile_trial(cfg(m=24, k=64, n=40, dtype="fp8", policy={"grid": "2x4x2", "weight_stationary": False}))
    assert r["run"].validated


@pytest.mark.parametrize("R,C", [(1152, 3456), (1152, 1152), (1152, 4304), (4304, 1152), (80, 48), (64, 7)])
@pytest.mark.parametrize("T", [1472, 64])
def test_panel_home_geometry(R, C, T):
    """Brute force: the blocks tile the matrix exactly once, hold whole panel rows
    (rows start on panel edges), sit on distinct tiles, and the fullest is within 5 %
    of an ideal even split for the So400m shapes on ipu21 (a panel is the smallest
    shard: tiny matrices may hold more per tile than whole rows would)."""
    (r0, nr, c0, nc, tile), size = home_blocks(R, C, 1, T, 32)
    cover = np.zeros((R, C), np.int64)
    for a, b, c, d in zip(r0, nr, c0, nc):
        cover[a:a + b, c:c + d] += 1
    assert (cover == 1).all()
    assert (r0 % 32 == 0).all() and (((r0 + nr) % 32 == 0) | (r0 + nr == R)).all()
    assert len(np.unique(tile)) == len(tile) and tile.max() < T
    if R >= 1152:        # the So400m shapes: never worse than whole rows, near ideal on ipu21
        assert size.max() <= home_blocks(R, C, 1, T, 0)[1].max()
        assert T == 64 or size.max() <= 1.05 * -(-R * C // T)

"""Planted bugs must fail read-back validation, naming the op, in FP16- and FP8-activation
mode alike: each is injected into what the machine receives (host streams, placed
bytes, the lowered program's relocation table), never into the reference or the data
the checks hold the device to."""
import dataclasses
import sys

import numpy as np
import pytest

from compiler.phases import compile_trial, target_of
from compiler.readback import ulp16
from compiler.compare import real_rows
from compiler.run import run
from conftest import REPO
from helpers import target_cfg

sys.path.insert(0, str(REPO / "experiments" / "planted"))
import plants  # noqa: E402

VIT = dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=2)
MODES = {"fp16": {}, "fp8": {"fp8_activations": True}}
LAST = VIT["layers"] - 1


@pytest.fixture(scope="module", params=list(MODES))
def trial(request):
    cfg = dict(model=dict(VIT, **MODES[request.param]), target=target_cfg("tiny"), policy={"check": "all"})
    return cfg, compile_trial(cfg)


def rerun(trial, streams=None, inject=None, lower_res=None, check="all"):
    cfg, r = trial
    return run(lower_res or r["lower"], r["model"], target_of(cfg), check, streams, inject, ref=r["reference"])


def zeroed(r, name, index=np.s_[...]):
    """The host stream of parameter `name` with the last layer's member[index] zeroed."""
    a = np.array(r["model"].data[name])
    a[LAST][index] = 0
    return {name: a}


def assert_caught(res, op, iteration=LAST):
    m = res.metrics()
    assert not res.validated and m["ops_failed"] > 0, m
    f = m["first_failed_op"]
    assert (f["op"], f["iteration"]) == (op, iteration), f
    assert f["error"] > f["bound"] and 0 <= f["tile"] < 64


def test_clean_trial_validates_op_by_op(trial):
    _, r = trial
    m = r["run"].metrics()
    ops = len(r["model"].graph.ops)
    assert r["run"].validated and m["ops_checked"] == ops * VIT["layers"] and m["ops_failed"] == 0, m
    assert 0 < m["op_error_ratio"] <= 1 and "first_failed_op" not in m


@pytest.mark.parametrize("bias,op", [("mlp.fc2.bias", "fc2"), ("attn.proj.bias", "proj"),
                                     ("mlp.fc1.bias", "fc1"), ("attn.qkv.bias", "qkv"), ("norm2.bias", "ln2")])
def test_dropped_bias_or_beta(trial, bias, op):
    assert_caught(rerun(trial, streams=zeroed(trial[1], bias)), op)


def test_zeroed_fc2_k_rows(trial):
    """32 of So400m's 4304 k-rows, scaled to this model: 2 of 64."""
    assert_caught(rerun(trial, streams=zeroed(trial[1], "mlp.fc2.weight", np.s_[10:12])), "fc2.xw")


def test_zeroed_fc2_weight_columns(trial):
    """8 of 1152 output columns, scaled: 1 of 32 (in the weight the host sends)."""
    assert_caught(rerun(trial, streams=zeroed(trial[1], "mlp.fc2.weight", np.s_[:, 5])), "fc2.xw")


def test_zeroed_fc2_output_columns_in_placed_bytes(trial):
    """A kernel that leaves an output column unwritten: column 3 of fc2's matmul output
    zeroed in tile memory right after the superstep that completes it, last layer."""
    _, r = trial
    lo, g = r["lower"], r["model"].graph
    n = next(i for i, op in enumerate(g.ops) if op.outputs[0] == "fc2.xw")
    d = lo.dump
    rows = np.flatnonzero((d["op"] == n) & (d["c0"] <= 3) & (3 < d["c0"] + d["cols"]))
    b0, b1 = lo.body                                  # executed step of the last iteration's
    step = LAST * (b1 - b0) + int(d["step"][rows[0]]) - 1  # superstep (dump steps are 1-based)

    def inject(s, mem):
        if s == step:
            for i in rows:
                at = d["addr"][i] + (np.arange(d["rows"][i]) * d["cols"][i] + 3 - d["c0"][i]) * 2
                for a in at:
                    mem.flat[mem.pos(d["tile"][i], a) + np.arange(2)] = 0
    assert_caught(rerun(trial, inject=inject), "fc2.xw")


def relocations(r, kind="member"):
    """(offset of the stride word in program.table, tile, the op reading the relocated
    member or scale) of every Repeat relocation entry of `kind` (experiments/planted)."""
    return [e[:3] for e in plants.relocations(r, kind)]


@pytest.mark.parametrize("policy", [{}, {"weight_stationary": False}])
def test_relocation_pointing_at_previous_layer(trial, policy):
    """One relocation entry (one tile) with stride 0: iteration 1 reads layer 0's
    member (weights resident and read in place, or gathered from their homes)."""
    cfg, r = trial
    if policy:
        cfg = dict(cfg, policy=policy)
        r = compile_trial(cfg)
    entries = relocations(r)
    at, tile, op = next(e for e in entries if e[2].endswith(".xw"))
    assert_stride_zero_caught(cfg, r, at, tile, op)


def assert_stride_zero_caught(cfg, r, at, tile, op):
    """The relocation entry whose stride word is at `at` zeroed in the program's bytes:
    iteration 1 reads layer 0's member, and read-back must name `op` there, on `tile` or
    on a tile `tile` sends to (a home's relocated send: with broadcast sends one entry
    feeds several tiles, and the first failing one is a receiver)."""
    prog = r["lower"].program
    table = prog.table.copy()
    table[at:at + 4] = 0
    lo = dataclasses.replace(r["lower"], program=dataclasses.replace(prog, table=table))
    res = run(lo, r["model"], target_of(cfg), ref=r["reference"])
    assert_caught(res, op, iteration=1)
    x = r["place"].tilegraph.xfer
    assert res.metrics()["first_failed_op"]["tile"] in {tile} | set(x["dst"][x["src"] == tile].tolist())


def test_scale_relocation_stride_zero(trial):
    """One tile's per-layer scale word not relocated (stride 0): iteration 1 multiplies
    by layer 0's weight scale (each layer's weights have their own FP8 scale)."""
    cfg, r = trial
    g = r["model"].graph
    weight = {o.outputs[0]: o.inputs[1] for o in g.ops if o.kind == "matmul"}
    ratio = lambda e: (lambda s: max(s[0] / s[1], s[1] / s[0]))(g.tensors[weight[e[2]]].scale)
    at, tile, op = max((e for e in relocations(r, "scale") if e[2].endswith(".xw")), key=ratio)
    assert ratio((at, tile, op)) > 1.1           # else reading layer 0's scale would be harmless
    assert_stride_zero_caught(cfg, r, at, tile, op)


def zeroed_first(r, name):
    a = np.array(r["model"].data[name])
    a[0] = 0
    return {name: a}


def test_check_modes(trial):
    """A bug in the FIRST layer (the one `last_iteration` does not read back op by op): every
    mode that reads iteration 0 names the op there; `last_iteration` still fails the run in
    FP16 through the layer-output check, naming iteration 0 (issue #23: a middle-layer bug
    used to pass op by op). Clean trials validate and count the ops each mode reads."""
    cfg, r = trial
    fp8 = cfg["model"].get("fp8_activations", False)
    streams = zeroed_first(r, "mlp.fc2.bias")
    ops = len(r["model"].graph.ops)
    for check, iterations in (("rows", 2), ("all", 2), ("sampled", 2), ("last_iteration", 1)):
        res = rerun(trial, streams=streams, check=check)
        m = res.metrics()
        if check != "last_iteration":
            assert_caught(res, "fc2", iteration=0)
        elif not fp8:
            assert not res.validated and m["layers_failed"] > 0 and m["first_failed_layer"]["iteration"] == 0, m
        clean = rerun(trial, check=check).metrics()
        assert clean["validated"] and clean["ops_checked"] == ops * iterations, clean
        assert clean["layers_checked"] == VIT["layers"] and clean["layers_failed"] == 0
    with pytest.raises(ValueError, match="run.check"):
        rerun(trial, check="some")


def test_nan_in_an_input_fails_naming_op_and_tile(trial):
    """A NaN in what an op reads (fc2's bias member of layer 0, as sent) fails that op in
    iteration 0 with an infinite error -- not a NaN bound that every comparison passes."""
    _, r = trial
    a = np.array(r["model"].data["mlp.fc2.bias"])
    a[0, 0, 3] = np.nan
    res = rerun(trial, streams={"mlp.fc2.bias": a}, check="rows")
    assert_caught(res, "fc2", iteration=0)
    assert res.metrics()["first_failed_op"]["error"] == float("inf")


def test_nan_in_an_output_fails(trial):
    """NaN written into fc1's placed output right after its superstep, iteration 0."""
    _, r = trial
    d = r["lower"].dump
    n = next(i for i, op in enumerate(r["model"].graph.ops) if op.outputs[0] == "fc1")
    row = np.flatnonzero(d["op"] == n)[0]
    step = int(d["step"][row]) - 1                  # iteration 0's superstep (dump steps are 1-based)

    def inject(s, mem):
        if s == step:
            mem.flat[mem.pos(d["tile"][row], d["addr"][row]) + np.arange(2)] = np.frombuffer(
                np.float16(np.nan).tobytes(), np.uint8)
    res = rerun(trial, inject=inject, check="rows")
    assert_caught(res, "fc1", iteration=0)
    f = res.metrics()["first_failed_op"]
    assert f["tile"] == int(d["tile"][row]) and f["error"] == float("inf")


def test_op_error_nan_and_inf():
    """op_error's own contract: a non-finite device value or reference is an infinite
    error, whatever the bound (NaN compares false with everything)."""
    from compiler.ir import Op
    from compiler.readback import op_error
    op = Op("add", ("a", "b"), ("y",))
    x = [np.array([[1.0, 2.0, np.nan]]), np.array([[1.0, 1.0, 1.0]])]
    _, bound, err = op_error(op, [v.copy() for v in x], np.array([[2.0, np.inf, 2.0]], np.float32))
    assert err[0, 0] <= bound[0, 0] and np.isinf(err[0, 1]) and np.isinf(err[0, 2])


def test_real_rows_and_ulp():
    from compiler.models import vit
    g, _ = vit.build(VIT)                      # 15 tokens, padded to 16
    assert real_rows(g, "y").tolist() == [True] * 15 + [False]
    assert real_rows(g, "scores").reshape(2, 16)[:, 15].tolist() == [False, False]
    assert ulp16(np.array([1.0, 1.5, 2.0, 0.0, 2.0 ** -20])).tolist() == [2 ** -10, 2 ** -10, 2 ** -9, 2 ** -24,
                                                                          2 ** -24]


def test_output_npz(trial):
    import io
    _, r = trial
    res = r["run"]
    blob = res.output_npz()
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        assert sorted(z.files) == ["reference/y", "y"]
        assert z["y"].dtype == np.float32 and z["y"].shape == (16, 32)
        assert np.array_equal(z["reference/y"], r["reference"].outputs["y"].astype(np.float32))
        assert np.array_equal(z["y"], res.outputs["y"])
    assert rerun(trial).output_npz() == blob                  # deterministic: same bytes


def test_checks_off_the_simulator_thread_keep_order_and_errors(trial, monkeypatch):
    """Checks run on a worker beside the simulator: the same figures as the module's run,
    and an error inside a check reaches the caller instead of vanishing with the thread."""
    again = rerun(trial)
    assert again.metrics() == trial[1]["run"].metrics()
    import compiler.readback as rb

    def broken(*a, **k):
        raise RuntimeError("check broke")
    monkeypatch.setattr(rb, "op_error", broken)
    with pytest.raises(RuntimeError, match="check broke"):
        rerun(trial)


def test_snapshot_places_blocks_as_read():
    """A read-back snapshot (bytes copied on the simulator's thread, values made on the
    worker) places blocks of several shapes where each starts (NaN where none lies), f16
    and fp8, and makes its values once."""
    from compiler.readback import DTYPES, Snapshot
    rng = np.random.default_rng(3)
    for dt in ("f16", "fp8"):
        want = np.full((6, 10), np.nan, np.float32)
        blocks = []
        for (r, c), starts in {(2, 4): [(0, 0), (0, 4), (4, 6)], (1, 3): [(3, 1), (5, 0)]}.items():
            vals = rng.standard_normal((len(starts), r, c)).astype(DTYPES[dt])
            raw = vals.view(np.uint8).reshape(len(starts), -1).copy()
            blocks.append((raw, r, c, np.array([s[0] for s in starts]), np.array([s[1] for s in starts])))
            for v, (r0, c0) in zip(vals, starts):
                want[r0:r0 + r, c0:c0 + c] = v.astype(np.float32)
        snap = Snapshot((6, 10), DTYPES[dt], blocks)
        got = snap.array()
        assert np.array_equal(got, want, equal_nan=True)
        assert snap.array() is got                      # made once


def test_row_sampled_checks_on_a_longer_sequence():
    """check=rows with more rows than ROW_STRIDE (63 tokens: 64 rows, attention's scores 128):
    the clean trial validates with every op of both iterations checked on sampled rows, and
    fc1's weight member of layer 0 with one element's exponent bit flipped (every row of one
    output column wrong) fails fc1.xw in iteration 0."""
    from compiler.readback_views import ROW_STRIDE
    cfg = dict(model=dict(VIT, tokens=63), target=target_cfg("tiny"), policy={"check": "rows"})
    r = compile_trial(cfg)
    assert r["model"].graph.tensors["x"].shape[0] > ROW_STRIDE
    m = r["run"].metrics()
    assert r["run"].validated and m["ops_checked"] == len(r["model"].graph.ops) * VIT["layers"], m
    w = np.array(r["model"].data["mlp.fc1.weight"])
    w[0].view(np.uint8).reshape(-1)[100] ^= 0x04
    res = run(r["lower"], r["model"], target_of(cfg), "rows", {"mlp.fc1.weight": w}, ref=r["reference"])
    assert_caught(res, "fc1.xw", iteration=0)

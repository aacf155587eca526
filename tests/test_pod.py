"""A ViT tower pipelined over two tiny chips (target tinypod2, compiler/pod): the split, each
chip compiled by the single-chip phases, the LINK transfer between them executed and costed
by the simulator, its cycles re-derived by an oracle that shares no code with it, and
injected faults on the wire (a wrong byte, a dropped row) that must be caught."""
import dataclasses

import numpy as np
import pytest
import yaml

from compiler import mapper as mappers
from compiler.phases import compile_trial, policy_of, target_of
from compiler.pod import pod_of
from compiler.pod.link import encode
from compiler.pod.run import pod_run
from compiler.pod.split import chip_model, choose
from compiler.result import Rejection
from compiler.sim import MachineFault
from compiler.sim import link as sim_link
from compiler.sim.link_oracle import link_cycles
from compiler.target import ConfigError
from helpers import REPO, target_cfg

SIGLIP = dict(name="vit", preset="custom", width=64, hidden=172, heads=2, image=56, patch=14, layers=4, gelu="erf",
              input="")


def pod_target(name: str = "tinypod2", **pod) -> dict:
    """conf/target/<name>.yaml composed as Hydra does: its chip's figures, then its own keys."""
    own = yaml.safe_load((REPO / "conf" / "target" / f"{name}.yaml").read_text())
    chip = [d for d in own.pop("defaults") if d != "_self_"][0]
    t = {**target_cfg(chip), **own}
    t["pod"] = {**t["pod"], **pod}
    return t


def cfg(**pod):
    return dict(model=dict(SIGLIP), target=pod_target(**pod), policy={})


@pytest.fixture(scope="module")
def trial():
    c = cfg()
    return c, compile_trial(c)


def test_pod_tower_validates(trial):
    c, r = trial
    run = r["run"]
    assert run.validated, run.failed
    assert r["report"].summary["status"] == "ok"
    assert list(run.split.layers) == [2, 2] and len(run.chips) == 2
    # the whole tower's outputs (the last chip's) against the numpy reference of the whole graph
    ref = r["reference"]
    for name, want in ref.outputs.items():
        got = run.outputs[name]
        assert np.abs(got.astype(np.float64) - want.astype(np.float64)).max() <= ref.tolerance
    # chip 0's output is the reference's layer 1 output within that layer's tolerance
    y = run.chips[0].run.outputs["y"]
    assert np.abs(y - ref.layers["values"][1].astype(np.float32)).max() <= ref.layers["tolerance"][1]
    assert run.model["ok"]                  # the timm-definition model check, on the whole tower
    for k, c_ in enumerate(run.chips):      # read-back per chip: every op and layer of each
        m = c_.run.readback
        assert m["ops_checked"] > 0 and m["ops_failed"] == 0 and m["layers_failed"] == 0, k
    assert run.chips[1].transfer == {"bytes": 16 * 64 * 2, "failed": 0}
    # latency = the stages + the transfer; images/s from the slowest stage
    li = run.links[0]
    assert run.cycles == run.chips[0].run.cycles + li["cycles"] + run.chips[1].run.cycles
    stages = run.throughput["stage_cycles"]
    assert run.throughput["images_per_s"] == round(1.5e9 / max(stages), 3)
    assert r["place"].metrics()["min_free_bytes"] == min(p.placement.min_free_bytes for p in r["place"].chips)
    html = r["report"].html
    assert "id='chips'" in html and "chip1-tile-memory" in html


def test_split_by_cost_and_memory(trial):
    c, r = trial
    m, t = r["model"], target_of(c)
    s = choose(m.graph, t, pod_of(c["target"]))
    assert s.layers == (2, 2) and s.considered == 3
    # a budget just under the chosen split's largest stage: that split is screened out
    tight = pod_of(pod_target(weight_budget=0.999 * max(s.param_bytes) / (t.tiles * t.tile_bytes)))
    rej = choose(m.graph, t, tight)
    assert isinstance(rej, Rejection) or (rej.layers != s.layers and rej.rejected_memory > 0)
    none = pod_of(pod_target(weight_budget=0.5 * min(s.param_bytes) / (t.tiles * t.tile_bytes)))
    rej = choose(m.graph, t, none)
    assert isinstance(rej, Rejection) and rej.reason == "pod_memory" and rej.figures["deficit_bytes"] > 0
    forced = choose(m.graph, t, pod_of(pod_target(layers=[3, 1])))
    assert forced.layers == (3, 1)
    assert choose(m.graph, t, pod_of(pod_target(layers=[3, 2]))).reason == "pod_layers"


def test_chip_graphs_cover_the_tower(trial):
    c, r = trial
    m = r["model"]
    s = r["plan"].split
    g0, g1 = (chip_model(m, s, k).graph for k in range(2))
    assert g0.tensors["y"].kind == "output" and g1.tensors["x"].kind == "input"
    assert "pixels" in g0.tensors and "pixels" not in g1.tensors and "embedding" in g1.tensors
    assert g0.repeat.count == g1.repeat.count == 2
    first, stop = m.graph.body()
    assert len(g0.ops) + len(g1.ops) == len(m.graph.ops) + (stop - first)
    d1 = chip_model(m, s, 1).data["attn.qkv.weight"]
    assert np.array_equal(np.asarray(d1), np.asarray(m.data["attn.qkv.weight"])[2:4])


def test_link_cost_matches_the_oracle(trial):
    c, r = trial
    lo, t = r["lower"], target_of(c)
    words = encode(lo.chips[0].program, lo.chips[1].program, "y", "x", 0, 6)
    tdict = c["target"]
    assert sim_link.cycles(words, t, 16_000_000_000, 2000) == link_cycles(words, tdict) == r["run"].links[0]["cycles"]
    # one link instead of six, a slower link, no latency: the two still agree, and each figure moves them
    for links, bps, lat in ((1, 16_000_000_000, 2000), (6, 1_000_000, 2000), (6, 16_000_000_000, 0)):
        w = words.copy()
        w[3] = links
        td = {**tdict, "pod": {**tdict["pod"], "link_bytes_per_s": bps, "link_latency_cycles": lat}}
        assert sim_link.cycles(w, t, bps, lat) == link_cycles(w, td)
    slow = dict(tdict, pod={**tdict["pod"], "link_bytes_per_s": 1_000_000})
    assert link_cycles(words, slow) > link_cycles(words, tdict)
    # a wrong figure on either side is a disagreement
    assert sim_link.cycles(words, t, 8_000_000, 2000) != link_cycles(words, tdict)
    # the per-tile port bounds it when one tile sends everything: 2048 B at 4 B/cycle
    d = sim_link.decode(words)
    one = d["send"].copy()
    one[:, 0] = 0
    w = np.concatenate([words[:7], one.ravel(), d["recv"].ravel()]).astype(np.uint32)
    assert link_cycles(w, tdict) == sim_link.cycles(w, t, 16_000_000_000, 2000) >= 2000 + 2048 // 4


def _rerun(c, r, inject):
    return pod_run(r["lower"], r["model"], r["reference"], target_of(c), policy_of(c), pod_of(c["target"]),
                   mappers.serial, inject_link=inject)


def test_wrong_byte_on_the_link_is_caught(trial):
    c, r = trial

    def flip(link, wire):
        w = wire.copy()
        w[700] ^= 0x40            # an exponent bit of one f16
        return w
    run = _rerun(c, r, flip)
    assert not run.validated
    assert "link 0->1: byte 700" in run.failed
    assert run.chips[1].transfer["failed"] == 1


def test_dropped_row_on_the_link_is_refused(trial):
    c, r = trial
    with pytest.raises(MachineFault, match="expects 2048 B, the link delivered 1920 B"):
        _rerun(c, r, lambda link, wire: wire[:-128])


def test_misplaced_receive_is_caught(trial):
    """A RECV whose rows put the right bytes in the wrong place (two rows swapped): the transfer
    check reads back where the RECV wrote, so it is chip 1's own checks that catch it (its
    per-op read-back of the layers reading x, and end to end)."""
    c, r = trial
    lo = r["lower"]
    prog = lo.chips[1].program
    h = {k: v.copy() for k, v in prog.host_in.items()}
    xs = np.flatnonzero(h["stream"] == prog.in_streams.index("x"))
    assert len(xs) >= 2
    a, b = xs[0], xs[1]
    if h["row_bytes"][a] * h["rows"][a] != h["row_bytes"][b] * h["rows"][b]:
        pytest.skip("the first two receive rows differ in size")
    h["host_off"][a], h["host_off"][b] = h["host_off"][b], h["host_off"][a]
    bad = dataclasses.replace(lo, chips=[lo.chips[0], dataclasses.replace(lo.chips[1], program=dataclasses.replace(
        prog, host_in=h))])
    run = pod_run(bad, r["model"], r["reference"], target_of(c), policy_of(c), pod_of(c["target"]), mappers.serial)
    assert not run.validated and run.failed.startswith("chip 1: ") and run.chips[1].transfer["failed"] == 0


def test_pod_config_errors():
    with pytest.raises(ConfigError, match="chips=1"):
        pod_of(pod_target(chips=1))
    with pytest.raises(ConfigError, match="links"):
        pod_of(pod_target(links=[6, 6]))
    with pytest.raises(ConfigError, match="unknown config key target.pod.speed"):
        pod_of(pod_target(speed=1))
    with pytest.raises(ConfigError, match="weight_budget"):
        target_of({"target": pod_target(weight_budget=0)})


def test_a_graph_without_layers_is_rejected():
    r = compile_trial(dict(model=dict(name="gemm", m=32, k=64, n=64, dtype="f16"), target=pod_target(), policy={}))
    assert r["report"].summary["status"] == "rejected"
    assert r["report"].summary["rejected"]["reason"] == "pod_graph"

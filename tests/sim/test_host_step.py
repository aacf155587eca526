"""HOST: stream items moved inside the run (images into a pipeline's first group, its
outputs out of the last). A 5-iteration loop [HOST in item i; GELU; HOST out item i]
whose HOST deltas a REPEAT relocates equals the program written out with each delta
stored, byte for byte and cycle for cycle; the cycle oracle agrees; and what the
machine refuses."""
import numpy as np
import pytest

from compiler import isa, sim
from compiler.lower.program import host_table
from compiler.sim import MachineFault
from compiler.sim.oracle import step_cycles

from .asm import R0_DATA, R0_DATA2, Asm

W = [0, 1, 2, 3]
E = 32                          # f16 elements a tile an item
ITEM = len(W) * E * 2           # bytes of one item of the stream
N = 5
IN, OUT = R0_DATA, R0_DATA2


def build(looped: bool, delta=lambda i: i * ITEM, row_tile=lambda t: t, mix=False):
    a = Asm()
    for i in range(1 if looped else N):
        if looped:
            a.on(None, isa.REPEAT, N, 0, 0, 0)
        a.on(W, isa.HOST, 0, 0, 0, 0)                      # patched below: one row per tile
        if mix:
            a.on(W[:1], isa.GELU, OUT, IN, E)
        a.sync()
        a.on(W, isa.GELU, OUT, IN, E, flags=isa.F_ERF)
        a.sync()
        a.on(W, isa.HOST, 1, 0, 0, 0)
        a.sync()
        for t in W:
            d = delta(i) & 0xFFFFFFFF
            a.code[t][-7 if mix and t == W[0] else -6] = isa.instr(isa.HOST, 0, W.index(t), 1, d)
            a.code[t][-2] = isa.instr(isa.HOST, 1, W.index(t), 1, d)
        if looped:
            for t in range(a.T):
                body = a.pc(t) - 1
                ents = [(a.code_word(t, 1, 4), ITEM), (a.code_word(t, body - 1, 4), ITEM)] if t in W else []
                a.code[t][0] = isa.instr(isa.REPEAT, N, body, a.reloc_table(t, ents), len(ents))
    a.stream_in("img", [])
    a.stream_out("res", N * ITEM, [])
    p = a.build()
    rows = lambda addr: [(0, j * E * 2, row_tile(t), addr, E * 2, 1, E * 2, E * 2) for j, t in enumerate(W)]
    p.step_in, p.step_out = host_table(rows(IN)), host_table(rows(OUT))   # row j: tile W[j]'s part of an item
    return p


def _img():
    x = np.random.default_rng(2).standard_normal((N, len(W), E)).astype(np.float16)
    return x, {"img": x.view(np.uint8).reshape(-1)}


def test_stepped_stream_equals_written_out():
    x, s = _img()
    pl, pu = build(True), build(False)
    rl, ru = sim.run(pl, s), sim.run(pu, s)
    assert np.array_equal(rl.outputs["res"], ru.outputs["res"])
    assert rl.step_kind == ru.step_kind == ["host", "compute", "host"] * N
    for f in ("step_cycles", "tile_cycles"):
        assert np.array_equal(getattr(rl, f), getattr(ru, f)), f
    assert np.array_equal(step_cycles(pl), rl.step_cycles) and np.array_equal(step_cycles(pu), ru.step_cycles)
    t = pl.target
    assert rl.step_cycles[0] == -(-ITEM // t["host_bytes_per_cycle"]) + t["sync_cycles"]
    # item i of the output is GELU of item i of the input (one item per iteration, in order)
    one = build(True)
    one.step_in = host_table([(0, 0, t_, IN, E * 2, 1, E * 2, E * 2) for t_ in W])   # every tile: the item's first row
    y = rl.outputs["res"].view(np.float16).reshape(N, len(W), E)
    assert not np.array_equal(y[0], y[1])
    r1 = sim.run(one, s).outputs["res"].view(np.float16).reshape(N, len(W), E)
    assert all(np.array_equal(r1[i, j], y[i, 0]) for i in range(N) for j in range(len(W)))
    assert rl.host_bytes == {"in": 0, "out": 0}       # nothing moves before or after the run


def test_host_refusals():
    x, s = _img()
    with pytest.raises(MachineFault, match="HOST moves stepped row 2, which names tile 3") as e:
        sim.run(build(True, row_tile=lambda t: 3 if t == 2 else t), s)
    assert e.value.tile == 2
    with pytest.raises(MachineFault, match="reaches past the end of its input stream"):
        sim.run(build(True, delta=lambda i: (i + 1) * ITEM), s)            # item N in the last iteration
    with pytest.raises(MachineFault, match="mixes HOST with compute"):
        sim.run(build(True, mix=True), s)

"""Host streams round trip; cycles and profile samples equal the Target formulas."""
import math

import numpy as np

from compiler import isa, sim

from .asm import PROFILE, R0_DATA, R0_DATA2, R1, Asm, put


def test_host_round_trip_strided():
    a = Asm()
    x = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)
    # scatter 32 rows of 48 B (host stride 128) to tile 5 at stride 64, and the
    # whole stream contiguously to tile 63; read both back into one output stream
    a.stream_in("x", [(16, 5, R1, 48, 32, 128, 64), (0, 63, R0_DATA, 4096, 1, 4096, 4096)])
    a.stream_out("y", 48 * 32 + 4096, [(0, 5, R1, 48, 32, 48, 64), (1536, 63, R0_DATA, 4096, 1, 0, 0)])
    res = sim.run(a.build(), {"x": x})
    y = res.outputs["y"]
    assert np.array_equal(y[:1536].reshape(32, 48), np.stack([x[16 + r * 128:][:48] for r in range(32)]))
    assert np.array_equal(y[1536:], x)
    assert res.step_kind == [] and res.total_cycles == 0
    moved = 2 * (48 * 32 + 4096)
    assert res.host_cycles == 2 * math.ceil(moved / 2 / a.t.host_bytes_per_cycle)


def test_cycles_and_profile_samples():
    t_ = Asm().t
    a = Asm()
    A = np.ones((16, 16), np.float16)
    s = {"a": put(range(a.T), R0_DATA, A, a, "a"), "b": put(range(a.T), R1, A, a, "b")}
    # step 0: tiles 0..9 one matmul, tile 1 two, tile 2 also a copy
    a.matmul(range(10), R0_DATA, R1, R0_DATA2, 16, 16, 16)
    a.matmul(1, R0_DATA, R1, R0_DATA2 + 1024, 16, 16, 16)
    a.on(2, isa.COPY, R0_DATA2 + 2048, R0_DATA, 64, 4, 64, 64)
    a.sync()
    a.sync()                                    # step 1: idle
    a.exch(6, sends=[(7, R0_DATA, 100, 3, 128)])  # step 2: 300 B exchange
    a.exch(7, recvs=[(6, R1 + 4096, 300, 1, 0)])
    a.sync()
    res = sim.run(a.build(), s)
    mm = t_.matmul_cycles(16, 16, 16, "f16")
    assert res.step_kind == ["compute", "idle", "exchange"]
    tc = res.tile_cycles
    assert tc[0, 0] == mm and tc[0, 1] == 2 * mm and tc[0, 2] == mm + t_.copy_cycles(256)
    assert tc[0, 10:].sum() == 0 and not tc[1].any()
    send = np.zeros(a.T, np.int64); send[6] = 300
    recv = np.zeros(a.T, np.int64); recv[7] = 300
    ex = t_.exchange_cycles(send, recv)
    assert tc[2, 6] == ex == tc[2, 7] and tc[2].sum() == 2 * ex
    expect = np.array([2 * mm, 0, ex]) + t_.sync_cycles
    assert res.step_cycles.tolist() == expect.tolist()
    assert res.total_cycles == expect.sum()
    assert res.exchange_bytes.tolist() == [0, 0, 300]
    assert res.profiled_steps == 3
    # instructions: 64 tiles x (3 SYNC + END) + 10 + 1 + 1 kernels + 2 EXCH
    assert res.instructions == a.T * 4 + 12 + 2


def test_profile_samples_live_in_tile_memory():
    """tile_cycles is read back from memory: a host_out of the profile area sees
    the samples, and a kernel that later overwrites the area corrupts them (as an
    allocator overlapping a tensor with the profile reservation would)."""
    a = Asm()
    A = np.ones((8, 8), np.float16)
    s = {"a": put([0], R0_DATA, A, a, "a"), "b": put([0], R1, A, a, "b")}
    a.matmul(0, R0_DATA, R1, R0_DATA2, 8, 8, 8).sync()
    a.on(0, isa.COPY, PROFILE, R0_DATA, 4, 1, 4, 4).sync()   # clobbers sample 0 with data
    a.stream_out("p", 8, [(0, 0, PROFILE, 8, 1, 8, 8)])
    res = sim.run(a.build(), s)
    clobber = np.frombuffer(A.tobytes()[:4], "<u4")[0]
    assert res.tile_cycles[0, 0] == clobber != a.t.matmul_cycles(8, 8, 8, "f16")
    assert res.outputs["p"].view("<u4").tolist() == [clobber, a.t.copy_cycles(4)]


def test_profile_area_smaller_than_the_run():
    """Samples beyond profile_bytes are not written (the reservation is full);
    tile_cycles for those steps come from the machine's counters."""
    a = Asm()
    a.profile_bytes = 4
    A = np.ones((8, 8), np.float16)
    s = {"a": put([0], R0_DATA, A, a, "a"), "b": put([0], R1, A, a, "b")}
    a.sync()
    a.matmul(0, R0_DATA, R1, R0_DATA2, 8, 8, 8).sync()
    a.stream_out("p", 8, [(0, 0, PROFILE, 8, 1, 8, 8)])
    res = sim.run(a.build(), s)
    assert res.profiled_steps == 1
    assert res.tile_cycles[:, 0].tolist() == [0, a.t.matmul_cycles(8, 8, 8, "f16")]
    assert not res.outputs["p"].any()           # nothing written past the 4-byte area


def test_bad_host_streams():
    import pytest
    a = Asm()
    a.stream_in("x", [(0, 0, R0_DATA, 64, 1, 64, 64)])
    with pytest.raises(ValueError, match="missing input stream"):
        sim.run(a.build(), {})
    with pytest.raises(ValueError, match="1-D uint8"):
        sim.run(a.build(), {"x": np.zeros(64, np.float16)})
    with pytest.raises(sim.MachineFault, match="past the end of its input stream"):
        sim.run(a.build(), {"x": np.zeros(32, np.uint8)})

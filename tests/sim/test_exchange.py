"""Exchange: strided blocks, reshaping transfers, BSP snapshot semantics, cycles."""
import numpy as np

from compiler import sim

from .asm import R0_DATA, R0_DATA2, R1, R1_B, Asm, put


def test_strided_block_and_cycles():
    a = Asm()
    x = np.arange(16 * 128, dtype=np.uint32).view(np.uint8)[: 16 * 128].reshape(16, 128)
    s = {"x": put([4], R0_DATA, x, a, "x")}
    # tile 4 sends rows 2..9, bytes 32..96 of a 16x128 block to tile 9, packed 64 B apart
    a.exch(4, sends=[(9, R0_DATA + 2 * 128 + 32, 64, 8, 128)])
    a.exch(9, recvs=[(4, R1, 64, 8, 64)])
    a.sync()
    a.stream_out("o", 512, [(0, 9, R1, 512, 1, 512, 512)])
    res = sim.run(a.build(), s)
    assert np.array_equal(res.outputs["o"].reshape(8, 64), x[2:10, 32:96])
    assert res.step_kind == ["exchange"]
    assert res.exchange_bytes.tolist() == [512]
    send = np.zeros(a.T, np.int64); send[4] = 512
    recv = np.zeros(a.T, np.int64); recv[9] = 512
    phase = a.t.exchange_cycles(send, recv)
    assert res.tile_cycles[0, 4] == phase and res.tile_cycles[0, 9] == phase
    assert res.step_cycles[0] == phase + a.t.sync_cycles


def test_reshaping_transfer_rows_into_one_row():
    a = Asm()
    x = (np.arange(4 * 256) % 251).astype(np.uint8).reshape(4, 256)
    s = {"x": put([0], R0_DATA, x, a, "x")}
    # send 4 rows of 64 B at stride 256; receive them as one contiguous 256 B row
    a.exch(0, sends=[(1, R0_DATA + 16, 64, 4, 256)])
    a.exch(1, recvs=[(0, R0_DATA2, 256, 1, 0)])
    a.sync()
    a.stream_out("o", 256, [(0, 1, R0_DATA2, 256, 1, 256, 256)])
    res = sim.run(a.build(), s)
    assert np.array_equal(res.outputs["o"], x[:, 16:80].reshape(-1))


def test_uneven_row_shapes_and_multiple_entries():
    """24-byte rows into 40-byte rows (gcd 8 chunks); two entries per pair kept in
    table order; a tile sending to itself."""
    a = Asm()
    x = (np.arange(2048) * 7 % 256).astype(np.uint8)
    s = {"x": put([2], R0_DATA, x, a, "x")}
    a.exch(2, sends=[(3, R0_DATA, 24, 5, 32), (3, R0_DATA + 1024, 16, 1, 0), (2, R0_DATA, 8, 2, 8)])
    a.exch(3, recvs=[(2, R1, 40, 3, 48), (2, R1 + 512, 16, 1, 0)])
    a.exch(2, recvs=[(2, R1, 16, 1, 0)])   # second EXCH on the same tile, same superstep
    a.sync()
    a.stream_out("o", 160, [(0, 3, R1, 40, 3, 40, 48), (120, 3, R1 + 512, 16, 1, 16, 16),
                            (136, 2, R1, 16, 1, 16, 16)])
    res = sim.run(a.build(), s)
    o = res.outputs["o"]
    sent = x[:5 * 32].reshape(5, 32)[:, :24].reshape(-1)
    assert np.array_equal(o[:120], sent)
    assert np.array_equal(o[120:136], x[1024:1040])
    assert np.array_equal(o[136:152], x[:16])


def test_exchange_is_bulk_synchronous_swap():
    """Two tiles swap the buffer they send from: every read sees pre-step memory."""
    a = Asm()
    s = {"x": put([0], R0_DATA, np.full(64, 1, np.uint8), a, "x"),
         "y": put([1], R0_DATA, np.full(64, 2, np.uint8), a, "y")}
    a.exch(0, sends=[(1, R0_DATA, 64, 1, 0)], recvs=[(1, R0_DATA, 64, 1, 0)])
    a.exch(1, sends=[(0, R0_DATA, 64, 1, 0)], recvs=[(0, R0_DATA, 64, 1, 0)])
    a.sync()
    a.stream_out("o", 128, [(0, 0, R0_DATA, 64, 1, 64, 64), (64, 1, R0_DATA, 64, 1, 64, 64)])
    res = sim.run(a.build(), s)
    assert (res.outputs["o"][:64] == 2).all() and (res.outputs["o"][64:] == 1).all()


def _send_16k(senders):
    """Each tile of `senders` sends 16 KiB (its region-1 pair) to tile 20 + its index."""
    a = Asm()
    n = 16 * 1024
    for i, t in enumerate(senders):
        a.exch(t, sends=[(20 + i, R1, n, 1, 0)])
        a.exch(20 + i, recvs=[(t, R1_B, n, 1, 0)])
    a.sync()
    return a, sim.run(a.build(), {})


def test_one_tile_sends_at_4_bytes_per_cycle_whatever_its_neighbours_do():
    """docs/architecture.md §2: 4 B/cycle per tile, no pair bonus. One tile sending 16 KiB alone
    needs at least 16384 / 4 + 100 = 4,196 cycles; two tiles of one (former)
    supertile, 0 and 1, each sending 16 KiB, take exactly as long."""
    a, alone = _send_16k([0])
    _, pair = _send_16k([0, 1])
    assert alone.tile_cycles[0, 0] >= 4196
    assert pair.tile_cycles[0, 0] == pair.tile_cycles[0, 1] == alone.tile_cycles[0, 0]
    assert alone.step_cycles[0] == pair.step_cycles[0] >= 4196 + a.t.sync_cycles

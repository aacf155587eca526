"""Multicast sends (isa.MCAST, policy.broadcast_sends): one send entry, a receiver list
in the table blob; every listed tile receives the bytes, the sender is charged once, and
the machine refuses malformed lists and unmatched receivers, naming tile, step and pc."""
import numpy as np
import pytest

from compiler import isa, sim
from compiler.sim import MachineFault, oracle

from .asm import R0_DATA, R0_DATA2, R1, Asm, put

SRC, DST = 4, (9, 10, 11)


def _mcast(a, tile, src_addr, rb, rows, stride, receivers, k=None):
    """One EXCH on `tile` with a multicast send entry whose list follows it."""
    a.exch(tile, sends=[(isa.MCAST | isa.ENTRY_BYTES, src_addr, rb, rows, stride)])
    a.table_words(tile, [len(receivers) if k is None else k, *receivers])


def _program(recvs=None, receivers=DST, k=None):
    """Tile 4 multicasts rows 2..9, bytes 32..96 of a 16 x 128 block to DST; each
    receives it in its own row shape (recvs: tile -> receive entry)."""
    a = Asm()
    x = (np.arange(16 * 128) * 13 % 251).astype(np.uint8).reshape(16, 128)
    s = {"x": put([SRC], R0_DATA, x, a, "x")}
    a.sync()                                          # the exchange is superstep 1
    _mcast(a, SRC, R0_DATA + 2 * 128 + 32, 64, 8, 128, receivers, k)
    shapes = {9: (SRC, R1, 64, 8, 64), 10: (SRC, R0_DATA2, 512, 1, 0), 11: (SRC, R1 + 1024, 128, 4, 256)}
    for d, e in (shapes if recvs is None else recvs).items():
        a.exch(d, recvs=[e])
    a.sync()
    a.stream_out("o", 3 * 512, [(0, 9, R1, 64, 8, 64, 64), (512, 10, R0_DATA2, 512, 1, 512, 512),
                                (1024, 11, R1 + 1024, 128, 4, 128, 256)])
    return a, s, x[2:10, 32:96].reshape(-1)


def test_one_sender_three_receivers_charged_once():
    a, s, want = _program()
    prog = a.build()
    res = sim.run(prog, s)
    o = res.outputs["o"]
    for i in range(3):                                # differential: every receiver holds the bytes
        assert np.array_equal(o[i * 512:(i + 1) * 512], want)
    assert res.exchange_bytes.tolist() == [0, 512]    # sent once, not 3 x 512
    send = np.zeros(a.T, np.int64)
    send[SRC] = 512
    recv = np.zeros(a.T, np.int64)
    recv[list(DST)] = 512
    phase = a.t.exchange_cycles(send, recv)
    assert phase == a.t.exchange_phase_cycles + 512 // a.t.exchange_bytes_per_cycle
    assert [res.tile_cycles[1, t] for t in (SRC, *DST)] == [phase] * 4
    assert res.step_cycles[1] == phase + a.t.sync_cycles
    assert oracle.step_cycles(prog).tolist() == res.step_cycles.tolist()   # the oracle agrees


def test_same_bytes_as_three_point_to_point_sends_but_cheaper():
    """The same program with three plain sends: the same bytes land, the sender pays 3x."""
    a, s, want = _program()
    b = Asm()
    put([SRC], R0_DATA, (np.arange(16 * 128) * 13 % 251).astype(np.uint8).reshape(16, 128), b, "x")
    b.sync()
    b.exch(SRC, sends=[(d, R0_DATA + 2 * 128 + 32, 64, 8, 128) for d in DST])
    for d, e in {9: (SRC, R1, 64, 8, 64), 10: (SRC, R0_DATA2, 512, 1, 0), 11: (SRC, R1 + 1024, 128, 4, 256)}.items():
        b.exch(d, recvs=[e])
    b.sync()
    b.stream_out("o", 1536, a.hout and [r[1:] for r in a.hout])
    r1, r2 = sim.run(a.build(), s), sim.run(b.build(), s)
    assert np.array_equal(r1.outputs["o"], r2.outputs["o"])
    assert r2.exchange_bytes[1] == 3 * r1.exchange_bytes[1]
    assert r2.step_cycles[1] - r1.step_cycles[1] == 2 * 512 // a.t.exchange_bytes_per_cycle


def _fault(a, s, match):
    with pytest.raises(MachineFault, match=match) as e:
        sim.run(a.build(), s)
    return e.value


def test_missing_receive_is_refused():
    a, s, _ = _program(recvs={9: (SRC, R1, 64, 8, 64), 10: (SRC, R0_DATA2, 512, 1, 0)})
    f = _fault(a, s, "tile 4 sends 1 entries to tile 11, which receives 0")
    assert (f.tile, f.step, f.pc) == (SRC, 1, 1)


def test_receiver_with_wrong_length_is_refused():
    a, s, _ = _program(recvs={9: (SRC, R1, 64, 8, 64), 10: (SRC, R0_DATA2, 504, 1, 0),
                              11: (SRC, R1 + 1024, 128, 4, 256)})
    f = _fault(a, s, "carries 512 B to tile 10, whose matching receive entry 0 expects 504 B")
    assert f.step == 1


def test_receiver_listed_twice_is_refused():
    a, s, _ = _program(receivers=(9, 10, 9))
    f = _fault(a, s, "multicast send entry 0 lists tile 9 twice")
    assert (f.tile, f.step, f.pc) == (SRC, 1, 1)


@pytest.mark.parametrize("receivers,k,match", [
    ((9,), None, r"of 1 tiles \(2 \.\."),           # a list of one is a plain send
    ((9, 10, 11), 0x10000, r"of 65536 tiles"),      # a count past the machine
    ((9, 10, 999), None, "lists tile 999 \\(the machine has"),
])
def test_malformed_lists_are_refused(receivers, k, match):
    a, s, _ = _program(receivers=receivers, k=k)
    f = _fault(a, s, match)
    assert (f.tile, f.step, f.pc) == (SRC, 1, 1)


def test_list_out_of_range_is_refused():
    a = Asm()
    a.exch(SRC, sends=[(isa.MCAST | 0x7FFFFFF0, R0_DATA, 64, 1, 0)])
    a.sync()
    f = _fault(a, {}, "receiver list at .* is misaligned or out of range")
    assert (f.tile, f.step, f.pc) == (SRC, 0, 0)


def test_bulk_synchronous_read_before_write():
    """Tile 9 multicasts its buffer to 4 and 10 while tile 4 sends into that very buffer
    on 9: every receiver sees the pre-step bytes."""
    a = Asm()
    s = {"p": put([9], R0_DATA, np.full(64, 7, np.uint8), a, "p"),
         "q": put([4], R0_DATA, np.full(64, 3, np.uint8), a, "q")}
    a.sync()
    a.exch(9, sends=[(isa.MCAST | (2 * isa.ENTRY_BYTES), R0_DATA, 64, 1, 0)], recvs=[(4, R0_DATA, 64, 1, 0)])
    a.table_words(9, [2, 4, 10])
    a.exch(4, sends=[(9, R0_DATA, 64, 1, 0)], recvs=[(9, R1, 64, 1, 0)])
    a.exch(10, recvs=[(9, R1, 64, 1, 0)])
    a.sync()
    a.stream_out("o", 192, [(0, 4, R1, 64, 1, 64, 64), (64, 10, R1, 64, 1, 64, 64), (128, 9, R0_DATA, 64, 1, 64, 64)])
    o = sim.run(a.build(), s).outputs["o"]
    assert (o[:128] == 7).all() and (o[128:] == 3).all()


def test_repeat_relocates_a_multicast_source_plan_reused():
    """A REPEAT of 3: tile 4 multicasts sequence member i (its source word relocated
    by 64 B an iteration) to tiles 9 and 10, which receive it into slot i (their
    destination words relocated too). The exchange plan is cached after iteration 0
    and reused with the relocated addresses: every slot holds its member."""
    a = Asm()
    seq = (np.arange(3 * 64) * 5 % 253).astype(np.uint8)
    s = {"x": put([SRC], R0_DATA, seq, a, "x")}
    for t in range(a.T):
        a.on(t, isa.REPEAT, 3, 2 if t in (SRC, 9, 10) else 1, 0, 0)
        if t == SRC:
            _mcast(a, t, R0_DATA, 64, 1, 0, (9, 10))
        elif t in (9, 10):
            a.exch(t, recvs=[(SRC, R1, 64, 1, 0)])
        if t in (SRC, 9, 10):
            rt = a.reloc_table(t, [(a.last_table + 4, 64)])
            a.code[t][0] = isa.instr(isa.REPEAT, 3, 2, rt, 1)
        a.on(t, isa.SYNC)
    a.stream_out("o", 2 * 192, [(0, 9, R1, 192, 1, 192, 192), (192, 10, R1, 192, 1, 192, 192)])
    prog = a.build()
    res = sim.run(prog, s)
    assert np.array_equal(res.outputs["o"], np.concatenate([seq, seq]))
    assert res.exchange_bytes.tolist() == [64, 64, 64]
    assert oracle.step_cycles(prog).tolist() == res.step_cycles.tolist()

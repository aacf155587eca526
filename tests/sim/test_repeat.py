"""REPEAT with relocation: a 5-iteration loop whose body reads sequence members
at base + i*stride (relocated MATMUL operands, relocated exchange send and
receive addresses) equals the unrolled program byte for byte, cycle for cycle,
profile sample for profile sample; and what the machine refuses."""
import numpy as np
import pytest

from compiler import exact, isa, sim  # exact: MATMUL sums exactly, rounds once (tests/test_exact.py)
from compiler.sim import MachineFault

from .asm import R0_DATA, R0_DATA2, R1, Asm

W = list(range(8))              # working tiles; the others only SYNC
m, k, n = 8, 16, 16
SEQ, SA = R0_DATA, m * k * 2    # a_i = SEQ + i*SA
SEQX, SX = R0_DATA + 4096, 128  # exchanged x_i = SEQX + i*SX
OUT, SO = R0_DATA2, m * n * 2   # out_i = OUT + i*SO
RECV = R0_DATA2 + 4096          # recv_i = RECV + i*SX
ACC = R0_DATA2 + 8192
COUNT = 5


def _streams(a, rng):
    A = rng.standard_normal((len(W), COUNT, m, k)).astype(np.float16)
    B = rng.standard_normal((len(W), k, n)).astype(np.float16)
    X = rng.integers(0, 256, (len(W), COUNT, SX), dtype=np.uint8)
    na, nb, nx = A[0].nbytes, B[0].nbytes, X[0].nbytes
    a.stream_in("a", [(i * na, t, SEQ, na, 1, na, na) for i, t in enumerate(W)])
    a.stream_in("b", [(i * nb, t, R1, nb, 1, nb, nb) for i, t in enumerate(W)])
    a.stream_in("x", [(i * nx, t, SEQX, nx, 1, nx, nx) for i, t in enumerate(W)])
    no, nr = COUNT * SO, COUNT * SX
    a.stream_out("out", len(W) * no, [(i * no, t, OUT, no, 1, no, no) for i, t in enumerate(W)])
    a.stream_out("recv", len(W) * nr, [(i * nr, t, RECV, nr, 1, nr, nr) for i, t in enumerate(W)])
    a.stream_out("acc", len(W) * SO, [(i * SO, t, ACC, SO, 1, SO, SO) for i, t in enumerate(W)])
    return {"a": A.view(np.uint8).reshape(-1), "b": B.view(np.uint8).reshape(-1),
            "x": X.reshape(-1)}, (A, B, X)


def build(looped: bool, count=COUNT, tweak=None, profile_bytes=256):
    """Prologue superstep (COPY on tile 0), then `count` iterations of
    [MATMUL a_i -> out_i; ADD acc += out_i; SYNC; EXCH x_i -> next tile's recv_i; SYNC],
    then an epilogue GELU on acc. looped: one REPEAT with a relocation table;
    else the iterations written out."""
    a = Asm()
    a.profile_bytes = profile_bytes
    s, data = _streams(a, np.random.default_rng(0))
    a.on(0, isa.COPY, ACC + 1024, ACC, 64, 1, 64, 64)
    a.sync()
    for it in range(1 if looped else count):
        i = 0 if looped else it
        rep_pc = {}
        for t in range(a.T):
            rep_pc[t] = a.pc(t)
            if looped:
                a.on(t, isa.REPEAT, count, 5 if t in W else 2, 0, 0)      # table patched below
        for t in W:
            a.matmul(t, SEQ + i * SA, R1, OUT + i * SO, m, k, n, scale=0.5)
            a.on(t, isa.ADD, ACC, ACC, OUT + i * SO, 1, m * n, 0)
        a.sync()
        for t in W:
            nxt, prv = W[(t + 1) % len(W)], W[(t - 1) % len(W)]
            a.exch(t, sends=[(nxt, SEQX + i * SX, SX, 1, SX)], recvs=[(prv, RECV + i * SX, SX, 1, SX)])
            tab = a.last_table
            if looped:
                p = rep_pc[t]
                entries = [(a.code_word(t, p + 1, 1), SA), (a.code_word(t, p + 1, 3), SO),
                           (a.code_word(t, p + 2, 3), SO),
                           (tab + 4, SX), (tab + isa.ENTRY_BYTES + 4, SX)]
                if tweak:
                    entries = tweak(a, t, p, entries)
                rt = a.reloc_table(t, entries)
                a.code[t][p] = isa.instr(isa.REPEAT, count, 5, rt, len(entries))
        a.sync()
    a.on(W, isa.GELU, ACC, ACC, m * n)
    a.sync()
    return a, s, data


def test_repeat_equals_unrolled():
    (al, s, (A, B, X)), (au, s2, _) = build(True), build(False)
    rl, ru = sim.run(al.build(), s), sim.run(au.build(), s2)
    for name in rl.outputs:
        assert np.array_equal(rl.outputs[name], ru.outputs[name]), name
    assert rl.step_kind == ru.step_kind == ["compute"] + ["compute", "exchange"] * COUNT + ["compute"]
    assert np.array_equal(rl.step_cycles, ru.step_cycles)
    assert np.array_equal(rl.tile_cycles, ru.tile_cycles)
    assert np.array_equal(rl.exchange_bytes, ru.exchange_bytes)
    assert rl.instructions == ru.instructions + al.T          # the REPEATs
    # against numpy: out_i = a_i @ b * 0.5; tile t received x_i of its predecessor
    out = rl.outputs["out"].view(np.float16).reshape(len(W), COUNT, m, n)
    ref = (exact.matmul_f32(A.astype(np.float32), B[:, None].astype(np.float32)) * np.float32(0.5)).astype(np.float16)
    assert np.array_equal(out, ref)
    assert np.array_equal(rl.outputs["recv"].reshape(len(W), COUNT, SX), np.roll(X, 1, axis=0))
    # cycles: the target formulas, per dynamic superstep
    t = al.t
    comp = t.matmul_cycles(m, k, n, "f16") + t.add_cycles(m * n, 1)
    send = np.zeros(al.T, np.int64)
    send[W] = SX
    exch = t.exchange_cycles(send, send)
    expect = ([t.copy_cycles(64)] + [comp, exch] * COUNT + [t.gelu_cycles(m * n)])
    assert rl.step_cycles.tolist() == [c + t.sync_cycles for c in expect]
    assert rl.tile_cycles[1:-1, 3].tolist() == [comp, exch] * COUNT
    assert rl.profiled_steps == len(expect)


def test_repeat_profile_area_smaller_than_the_loop():
    """4 samples fit: the loop's later supersteps come from the machine counters."""
    (al, s, _), (au, s2, _) = build(True, profile_bytes=16), build(False, profile_bytes=16)
    rl, ru = sim.run(al.build(), s), sim.run(au.build(), s2)
    assert rl.profiled_steps == ru.profiled_steps == 4
    assert np.array_equal(rl.tile_cycles, ru.tile_cycles) and len(rl.step_kind) == 2 * COUNT + 2


def test_relocated_operand_faults_in_the_iteration_it_goes_bad():
    """stride 4 on MATMUL a: iteration 0 is aligned, iteration 1 is not (superstep 3)."""
    def tweak(a, t, p, entries):
        return [(entries[0][0], 4)] + entries[1:]
    al, s, _ = build(True, tweak=tweak)
    with pytest.raises(MachineFault, match="MATMUL operand a at 0x54004 is not 8-byte aligned") as e:
        sim.run(al.build(), s)
    assert (e.value.tile, e.value.step, e.value.pc) == (0, 3, 3)


def test_negative_stride_wraps_mod_2_32():
    def tweak(a, t, p, entries):                 # walk the x sequence backwards from x_4
        return entries[:3] + [(entries[3][0], -SX), entries[4]]
    al, s, (A, B, X) = build(True, tweak=tweak)
    prog = al.build()
    for t in W:     # store x_4's address in the send entry (the first words of the tile's table)
        o = prog.table_off[t] + 4
        prog.table[o:o + 4] = np.array([SEQX + 4 * SX], "<u4").view(np.uint8)
    res = sim.run(prog, s)
    assert np.array_equal(res.outputs["recv"].reshape(len(W), COUNT, SX), np.roll(X[:, ::-1], 1, axis=0))


# ---- refusals ------------------------------------------------------------------------------
def _fault(a, s=None, match=None):
    with pytest.raises(MachineFault, match=match) as e:
        sim.run(a.build(), s or {})
    return e.value


def _simple(tiles_count=None, body=None, nsync_extra=(), first=None):
    """Every tile: [first...] REPEAT count, [COPY]; SYNC (+ extra SYNCs on some tiles)."""
    a = Asm()
    for t in range(a.T):
        if first:
            first(a, t)
        c = tiles_count(t) if tiles_count else 3
        extra = 1 if t in nsync_extra else 0
        a.on(t, isa.REPEAT, c, 2 + extra if body is None else body, 0, 0)
        a.on(t, isa.COPY, R1 + 64, R1, 16, 1, 16, 16)
        for _ in range(1 + extra):
            a.on(t, isa.SYNC)
    return a


def test_simple_repeat_runs():
    res = sim.run(_simple().build(), {})
    assert res.step_kind == ["compute"] * 3


def test_repeat_count_mismatch_names_the_tile():
    f = _fault(_simple(tiles_count=lambda t: 4 if t == 3 else 3), match="REPEAT mismatch.*deadlock")
    assert f.tile == 3 and f.step == 0 and "tile 3 repeats 4 times" in str(f)


def test_tile_without_repeat_is_named():
    a = Asm()
    for t in range(a.T):
        if t != 5:
            a.on(t, isa.REPEAT, 3, 2, 0, 0)
        a.on(t, isa.COPY, R1 + 64, R1, 16, 1, 16, 16).on(t, isa.SYNC)
    f = _fault(a, match="REPEAT mismatch.*tile 5 issues COPY where the other tiles issue REPEAT")
    assert f.tile == 5


def test_sync_count_mismatch_per_iteration():
    f = _fault(_simple(nsync_extra=[2]), match="REPEAT mismatch.*2 SYNCs per iteration")
    assert f.tile == 2


def test_repeat_must_start_a_superstep():
    first = lambda a, t: a.on(t, isa.COPY, R1 + 128, R1, 16, 1, 16, 16)
    _fault(_simple(first=first), match="first instruction of a superstep")
    first = lambda a, t: a.on(t, isa.COPY, R1 + 128, R1, 16, 1, 16, 16) if t == 7 else None
    assert _fault(_simple(first=first), match="REPEAT mismatch").tile == 7
    first = lambda a, t: a.on(t, isa.COPY, R1 + 128, R1, 16, 1, 16, 16) if t != 7 else None
    f = _fault(_simple(first=first), match="tile 7 issues REPEAT where the other tiles issue COPY")
    assert f.tile == 7 and f.step == 0 and f.pc == 0


def test_bad_bodies():      # nested loops: tests/sim/test_repeat_nested.py
    _fault(_simple(body=1), match="does not end with SYNC")       # body = the COPY only
    a = Asm()
    for t in range(a.T):
        a.on(t, isa.REPEAT, 2, 2, 0, 0).on(t, isa.SYNC).on(t, isa.END)
    _fault(a, match="END inside a REPEAT body")
    _fault(_simple(tiles_count=lambda t: 0), match="count 0")


def _reloc_program(entries_of, table_misalign=0):
    a = Asm()
    for t in range(a.T):
        a.on(t, isa.REPEAT, 3, 2, 0, 0).on(t, isa.COPY, R1 + 64, R1, 16, 1, 16, 16).on(t, isa.SYNC)
        a.on(t, isa.COPY, R1 + 64, R1, 16, 1, 16, 16).on(t, isa.SYNC)
        ents = entries_of(a, t)
        rt = a.reloc_table(t, ents)
        a.code[t][0] = isa.instr(isa.REPEAT, 3, 2, rt + table_misalign, len(ents))
    return a


def test_relocation_refusals():
    ok = lambda a, t: [(a.code_word(t, 1, 1), 16)]               # COPY dst += 16 per iteration
    sim.run(_reloc_program(ok).build(), {})
    f = _fault(_reloc_program(lambda a, t: [(R0_DATA, 4)] if t == 9 else ok(a, t)),
               match="names word 0x54000: outside the tile's code")
    assert f.tile == 9 and f.step == 0
    _fault(_reloc_program(lambda a, t: [(a.code_word(t, 1, 0), 1)]), match="code word 0 of pc 1, not an argument")
    _fault(_reloc_program(lambda a, t: [(a.code_word(t, 3, 1), 16)]), match="not an argument word of the REPEAT")
    _fault(_reloc_program(lambda a, t: [(a.code_word(t, 1, 1) + 2, 16)]), match="not 4-byte aligned")
    _fault(_reloc_program(lambda a, t: [(a.code_word(t, 1, 1), 16)] * 2), match="relocated twice")
    _fault(_reloc_program(ok, table_misalign=2), match="relocation table at .* not 4-byte aligned")
    _fault(_reloc_program(lambda a, t: [(a.t.memory_end + 4 * t, 1)]), match="outside the tile's code")


def test_relocated_code_word_after_the_loop_reads_stored_value():
    """Relocation applies only while iterating: the COPY after the loop (same
    instruction bytes, not relocated) writes its stored destination."""
    a = _reloc_program(lambda a, t: [(a.code_word(t, 1, 1), 16)])
    x = np.arange(16, dtype=np.uint8) + 1
    a.stream_in("x", [(0, 0, R1, 16, 1, 16, 16)])
    a.stream_out("o", 64, [(0, 0, R1 + 64, 64, 1, 64, 64)])
    res = sim.run(a.build(), {"x": x})
    assert np.array_equal(res.outputs["o"], np.r_[np.tile(x, 3), np.zeros(16, np.uint8)])
    assert res.step_kind == ["compute"] * 4


def test_sync_count_diverging_at_run_time_is_caught():
    """Tile 3 overwrites a body instruction with SYNC during iteration 0 (the stored
    body passed the static check): its iteration ends one SYNC early -> fault."""
    a = Asm()
    for t in range(a.T):
        a.on(t, isa.REPEAT, 3, 3, 0, 0)
        a.on(t, isa.COPY, a.code_word(t, 2, 0) if t == 3 else R1 + 64, R0_DATA, 32, 1, 32, 32)
        a.on(t, isa.COPY, R1 + 128, R1, 16, 1, 16, 16)
        a.on(t, isa.SYNC)
    s = {"sync": np.concatenate([isa.instr(isa.SYNC)] * a.T).view(np.uint8)}
    a.stream_in("sync", [(32 * t, t, R0_DATA, 32, 1, 32, 32) for t in range(a.T)])
    f = _fault(a, s, match="REPEAT mismatch across tiles \\(deadlock\\): tile 3 did not end iteration 0")
    assert f.tile == 3 and f.step == 0

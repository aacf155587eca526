"""Nested REPEAT (a loop over pipeline steps around a loop over a group's layers): a
3 x 4 nest whose inner body reads sequence member (o, i) through words listed in both
loops' relocation tables equals the program written out, byte for byte and cycle for
cycle; the independent cycle oracle agrees with the simulator on both, including an
outer-loop relocation of a word a cost reads; and what the machine refuses."""
import numpy as np
import pytest

from compiler import exact, isa, sim
from compiler.sim import MachineFault
from compiler.sim.oracle import step_cycles

from .asm import R0_DATA, R0_DATA2, R1, Asm

W = list(range(8))              # working tiles; the others only SYNC
m, k, n = 8, 16, 16
O, I = 3, 4                     # outer (steps) x inner (layers) iterations
SA, SX, SO = m * k * 2, 128, m * n * 2
SEQ, SEQX = R0_DATA, R0_DATA + 4096            # a_(o,i) = SEQ + (o*I + i)*SA, x_(o,i) likewise
OUT, RECV = R0_DATA2, R0_DATA2 + 4096          # out_(o,i), recv_(o,i)
ACC, SNAP = R0_DATA2 + 8192, R0_DATA2 + 9216   # acc; its snapshot after outer iteration o: SNAP + o*SO
GROW = 16                                      # the snapshot COPY moves 64 + o*GROW bytes (a cost word)


def _streams(a, rng):
    A = rng.standard_normal((len(W), O * I, m, k)).astype(np.float16)
    B = rng.standard_normal((len(W), k, n)).astype(np.float16)
    X = rng.integers(0, 256, (len(W), O * I, SX), dtype=np.uint8)
    na, nb, nx = A[0].nbytes, B[0].nbytes, X[0].nbytes
    a.stream_in("a", [(j * na, t, SEQ, na, 1, na, na) for j, t in enumerate(W)])
    a.stream_in("b", [(j * nb, t, R1, nb, 1, nb, nb) for j, t in enumerate(W)])
    a.stream_in("x", [(j * nx, t, SEQX, nx, 1, nx, nx) for j, t in enumerate(W)])
    for name, base, size in (("out", OUT, O * I * SO), ("recv", RECV, O * I * SX), ("snap", SNAP, O * SO)):
        a.stream_out(name, len(W) * size, [(j * size, t, base, size, 1, size, size) for j, t in enumerate(W)])
    return {"a": A.view(np.uint8).reshape(-1), "b": B.view(np.uint8).reshape(-1), "x": X.reshape(-1)}, (A, B, X)


def build(looped: bool, snap_first=False, tweak=None):
    """Per outer iteration o: the inner loop over i of [MATMUL a_(o,i) -> out_(o,i);
    ADD acc += out_(o,i); SYNC; EXCH x_(o,i) -> next tile's recv_(o,i); SYNC], and a
    superstep [COPY acc -> SNAP + o*SO, 64 + o*GROW bytes; SYNC], after the inner
    loop or (snap_first) before it, so that the inner body ends on the outer body's
    last SYNC. looped: two REPEATs; else every iteration written out."""
    a = Asm()
    s, data = _streams(a, np.random.default_rng(1))
    a.on(0, isa.COPY, ACC + 512, ACC, 64, 1, 64, 64)        # a prologue superstep
    a.sync()
    for o in range(1 if looped else O):
        outer_pc = {t: a.pc(t) for t in range(a.T)}
        if looped:
            a.on(None, isa.REPEAT, O, 0, 0, 0)                 # patched below

        def snap():
            a.on(W, isa.COPY, SNAP + o * SO, ACC, 64 + o * GROW, 1, 64 + o * GROW, 64 + o * GROW)
            a.sync()

        if snap_first:
            snap()
        for i in range(1 if looped else I):
            j = o * I + i
            inner_pc = {t: a.pc(t) for t in range(a.T)}
            if looped:
                a.on(None, isa.REPEAT, I, 0, 0, 0)
            for t in W:
                a.matmul(t, SEQ + j * SA, R1, OUT + j * SO, m, k, n, scale=0.5)
                a.on(t, isa.ADD, ACC, ACC, OUT + j * SO, 1, m * n, 0)
            a.sync()
            tabs = {}
            for t in W:
                nxt, prv = W[(t + 1) % len(W)], W[(t - 1) % len(W)]
                a.exch(t, sends=[(nxt, SEQX + j * SX, SX, 1, SX)], recvs=[(prv, RECV + j * SX, SX, 1, SX)])
                tabs[t] = a.last_table
            a.sync()
        if not snap_first:
            snap()
        if looped:
            for t in range(a.T):
                p, q = outer_pc[t], inner_pc[t]
                words = [(a.code_word(t, q + 1, 1), SA), (a.code_word(t, q + 1, 3), SO),
                         (a.code_word(t, q + 2, 3), SO)] if t in W else []
                words += [(tabs[t] + 4, SX), (tabs[t] + isa.ENTRY_BYTES + 4, SX)] if t in W else []
                inner = words
                outer = [(w, s_ * I) for w, s_ in words]              # the same words, a whole inner loop on
                sp = p + 1 if snap_first else a.pc(t) - 2             # the snapshot COPY
                if t in W:
                    outer += [(a.code_word(t, sp, 1), SO)] + [(a.code_word(t, sp, x), GROW) for x in (3, 5, 6)]
                if tweak:
                    inner, outer = tweak(a, t, inner, outer)
                ibody = a.pc(t) - q - 1 - (0 if snap_first else 1 + (t in W))    # less the snapshot
                a.code[t][q] = isa.instr(isa.REPEAT, I, ibody, a.reloc_table(t, inner), len(inner))
                a.code[t][p] = isa.instr(isa.REPEAT, O, a.pc(t) - p - 1, a.reloc_table(t, outer), len(outer))
    a.on(W, isa.GELU, ACC, ACC, m * n)
    a.sync()
    return a, s, data


@pytest.mark.parametrize("snap_first", [False, True], ids=["inner-then-snap", "inner-ends-outer"])
def test_nested_repeat_equals_unrolled(snap_first):
    (al, s, (A, B, X)), (au, s2, _) = build(True, snap_first), build(False, snap_first)
    pl, pu = al.build(), au.build()
    rl, ru = sim.run(pl, s), sim.run(pu, s2)
    for name in rl.outputs:
        assert np.array_equal(rl.outputs[name], ru.outputs[name]), name
    inner = ["compute", "exchange"] * I
    body = ["compute"] + inner if snap_first else inner + ["compute"]
    assert rl.step_kind == ru.step_kind == ["compute"] + body * O + ["compute"]
    for f in ("step_cycles", "tile_cycles", "exchange_bytes"):
        assert np.array_equal(getattr(rl, f), getattr(ru, f)), f
    assert rl.instructions == ru.instructions + al.T * (1 + O)      # one outer REPEAT, O inner ones
    # the oracle, sharing no code with the simulator, on the nest and the unrolled program
    assert np.array_equal(step_cycles(pl), rl.step_cycles)
    assert np.array_equal(step_cycles(pu), ru.step_cycles)
    # against numpy: out_(o,i) = a_(o,i) @ b * 0.5; recv from the predecessor
    out = rl.outputs["out"].view(np.float16).reshape(len(W), O * I, m, n)
    ref = (exact.matmul_f32(A.astype(np.float32), B[:, None].astype(np.float32)) * np.float32(0.5)).astype(np.float16)
    assert np.array_equal(out, ref)
    assert np.array_equal(rl.outputs["recv"].reshape(len(W), O * I, SX), np.roll(X, 1, axis=0))
    # the snapshot grows by GROW bytes an outer iteration (its cycles too: the relocated cost word)
    snap = rl.outputs["snap"].reshape(len(W), O, SO)
    for o in range(O):
        assert not snap[:, o, 64 + o * GROW:].any() and (snap[:, o, :64].any() or snap_first and o == 0)
    t, per = al.t, 2 * I + 1
    at = [1 + o * per + (0 if snap_first else 2 * I) for o in range(O)]
    assert rl.step_cycles[at].tolist() == [t.copy_cycles(64 + o * GROW) + t.sync_cycles for o in range(O)]


def test_word_in_both_tables_reads_the_sum():
    """Dropping the outer terms of the matmul's `a` word: outer iteration o reads the
    inner sequence of o = 0 again, so out_(o,i) = out_(0,i) for every o."""
    def tweak(a, t, inner, outer):
        return inner, outer[1:]
    al, s, (A, B, X) = build(True, tweak=tweak)
    out = sim.run(al.build(), s).outputs["out"].view(np.float16).reshape(len(W), O, I, m, n)
    assert all(np.array_equal(out[:, o], out[:, 0]) for o in range(O))
    assert not np.array_equal(out[:, 0, 0], out[:, 0, 1])


# ---- refusals ------------------------------------------------------------------------------
def _fault(a, match):
    with pytest.raises(MachineFault, match=match) as e:
        sim.run(a.build(), {})
    return e.value


def _nest(outer_body=4, inner_body=1, inner_count=lambda t: 2, lead=False, extra_sync=()):
    """Every tile: REPEAT 2 {[COPY; SYNC] REPEAT c {SYNC} SYNC (SYNC)}."""
    a = Asm()
    for t in range(a.T):
        a.on(t, isa.REPEAT, 2, outer_body + lead * 2 + (t in extra_sync), 0, 0)
        if lead:
            a.on(t, isa.COPY, R1 + 64, R1, 16, 1, 16, 16).on(t, isa.SYNC)
        a.on(t, isa.REPEAT, inner_count(t), inner_body, 0, 0)
        a.on(t, isa.SYNC).on(t, isa.COPY, R1 + 64, R1, 16, 1, 16, 16).on(t, isa.SYNC)
        if t in extra_sync:
            a.on(t, isa.SYNC)
    return a


def test_nested_loops_run_and_count_their_supersteps():
    assert len(sim.run(_nest().build(), {}).step_kind) == 2 * (2 + 1)
    assert len(sim.run(_nest(lead=True).build(), {}).step_kind) == 2 * (1 + 2 + 1)
    # the inner body ending on the outer body's last SYNC (REPEAT 2 {REPEAT 3 {SYNC}})
    a = Asm()
    a.on(None, isa.REPEAT, 2, 2, 0, 0).on(None, isa.REPEAT, 3, 1, 0, 0).on(None, isa.SYNC)
    assert len(sim.run(a.build(), {}).step_kind) == 6


def test_nested_refusals():
    f = _fault(_nest(inner_count=lambda t: 3 if t == 5 else 2), match="tile 5 repeats 3 times")
    assert f.tile == 5
    _fault(_nest(outer_body=2, inner_body=2), match="runs past the enclosing body's end")
    _fault(_nest(extra_sync=[4]), match="REPEAT mismatch.*tile 4")
    a = Asm()           # an inner REPEAT after a kernel in its superstep
    a.on(None, isa.REPEAT, 2, 3, 0, 0).on(None, isa.COPY, R1 + 64, R1, 16, 1, 16, 16)
    a.on(None, isa.REPEAT, 2, 1, 0, 0).on(None, isa.SYNC)
    _fault(a, match="first instruction of a superstep")

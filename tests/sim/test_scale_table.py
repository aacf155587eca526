"""F_SCALE_TABLE: a MATMUL's or CAST's scale word is the address of an f32 in the
tile's table blob, relocated by 4 bytes per REPEAT iteration, so iteration i scales by
member i's scale; the machine refuses an address outside the blob, and the oracle,
which costs it like an immediate, refuses it too."""
import numpy as np
import pytest

from compiler import exact, isa, sim  # exact: MATMUL sums exactly, rounds once (tests/test_exact.py)
from compiler.models.gemm import FP8
from compiler.sim import MachineFault, oracle

from .asm import R0_DATA, R0_DATA2, R1, Asm

W = [0, 1, 2, 3]
m, k, n = 8, 16, 16
OUT, SO = R0_DATA2, m * n * 2           # matmul out_i
COUT, SC = R0_DATA2 + 4096, m * n       # cast out_i (fp8)
SCALES = np.array([1.0, 2.0 ** -10, 3.5, 0.25], np.float32)


def build(scale_word=None, nreloc_scale=True):
    """REPEAT len(SCALES): MATMUL a b -> out_i × scale_i; CAST out_i -> fp8 cout_i / scale_i."""
    a = Asm()
    rng = np.random.default_rng(0)
    A = rng.standard_normal((m, k)).astype(np.float16)
    B = rng.standard_normal((k, n)).astype(np.float16)
    for name, arr, at in (("a", A, R0_DATA), ("b", B, R1)):
        b = arr.view(np.uint8).reshape(-1)
        a.stream_in(name, [(0, t, at, len(b), 1, len(b), len(b)) for t in W])
    L = len(SCALES)
    a.stream_out("out", len(W) * L * SO, [(i * L * SO, t, OUT, L * SO, 1, L * SO, L * SO) for i, t in enumerate(W)])
    a.stream_out("cout", len(W) * L * SC, [(i * L * SC, t, COUT, L * SC, 1, L * SC, L * SC)
                                           for i, t in enumerate(W)])
    for t in range(a.T):
        if t not in W:
            a.on(t, isa.REPEAT, L, 1, 0, 0)
            continue
        p = a.pc(t)
        a.on(t, isa.REPEAT, L, 3, 0, 0)                      # table patched below
        entries = [(a.code_word(t, p + 1, 3), SO), (a.code_word(t, p + 1, 7), 4 * nreloc_scale),
                   (a.code_word(t, p + 2, 1), SC), (a.code_word(t, p + 2, 2), SO),
                   (a.code_word(t, p + 2, 4), 4 * nreloc_scale)]
        rt = a.reloc_table(t, entries)
        st = a.table_words(t, SCALES.view(np.uint32))         # the scale table follows
        word = st if scale_word is None else scale_word(a, t)
        a.on(t, isa.MATMUL, R0_DATA, R1, OUT, m, k, n, word, dtype="f16", flags=isa.F_SCALE_TABLE)
        a.on(t, isa.CAST, COUT, OUT, m * n, word, dtype="fp8", dtype2="f16", flags=isa.F_SCALE_TABLE)
        a.code[t][p] = isa.instr(isa.REPEAT, L, 3, rt, len(entries))
    a.sync()
    s = {"a": A.view(np.uint8).reshape(-1), "b": B.view(np.uint8).reshape(-1)}
    return a.build(), s, (A, B)


def test_iteration_i_reads_member_i_scale():
    prog, s, (A, B) = build()
    res = sim.run(prog, s)
    out = res.outputs["out"].view(np.float16).reshape(len(W), len(SCALES), m, n)
    cout = res.outputs["cout"].view(FP8).reshape(len(W), len(SCALES), m, n)
    prod = exact.matmul_f32(A.astype(np.float32), B.astype(np.float32))
    for i, sc in enumerate(SCALES):
        want = (prod * sc).astype(np.float16)
        assert np.array_equal(out[:, i], np.broadcast_to(want, out[:, i].shape)), i
        back = cout[:, i].astype(np.float32)
        assert np.array_equal(back, np.broadcast_to((want.astype(np.float32) / sc).astype(FP8).astype(np.float32),
                                                     back.shape)), i
    assert np.array_equal(oracle.step_cycles(prog), res.step_cycles)      # costs as an immediate scale


def test_stride_zero_reads_member_0_scale():
    prog, s, (A, B) = build(nreloc_scale=False)
    out = sim.run(prog, s).outputs["out"].view(np.float16).reshape(len(W), len(SCALES), m, n)
    assert np.array_equal(out[:, 1], out[:, 0])


@pytest.mark.parametrize("where,match", [
    (lambda a, t: int(a.table_addr[t]) + 4 * len(a.tables[t]) - 8, "not an aligned f32 of the tile's table"),
    (lambda a, t: R0_DATA, "not an aligned f32 of the tile's table"),
    (lambda a, t: int(a.table_addr[t]) + 4 * len(a.tables[t]) - 14, "not an aligned f32")])
def test_scale_outside_the_table_is_refused(where, match):
    """The last iteration's relocated word runs past the blob (first case), a data
    address, or a misaligned one: the machine faults naming tile and pc; the oracle
    refuses the first two ahead of running (addresses outside the table)."""
    prog, s, _ = build(scale_word=where)
    with pytest.raises(MachineFault, match=match) as e:
        sim.run(prog, s)
    assert e.value.tile == W[0] and e.value.pc == 1
    with pytest.raises(ValueError, match="outside its tile's exchange table"):
        oracle.step_cycles(prog)

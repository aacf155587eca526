"""Synthetic full-size benchmarks: `python -m compiler.sim.bench [target] [rounds | repeat [iters]]`.

repeat: repeat_program -- a transformer-like layer body (LAYERNORM, Q/K/V MATMULs,
ring exchange of K/V blocks, two heads of flash attention over 3 key blocks with
ONLINE_SOFTMAX + ROWSCALE, output projection, CAST to fp8, fp8 FFN MATMUL, GELU,
transposed-b FFN MATMUL, residual ADDs) run `iters` times by one REPEAT whose
relocation table walks the six weight operands through per-layer copies.

Every tile runs `rounds` x (MATMUL m x k x n f16 (default 128x256x128); EXCH
sending its result to the next tile as m rows of 2n B, received as one contiguous
row; ADD of the received block into a; COPY of the left half of each row) -- about 1 MiB of kernel and
exchange traffic per tile for 3 rounds. Prints host wall time and simulated
cycles. Reads only Target + this synthetic Program (no graph, no reference).
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict

import ml_dtypes
import numpy as np

from .. import isa
from ..lower.program import Program, host_table
from ..target import Target
from . import run


def synthetic_program(t: Target, rounds: int = 3, m: int = 128, k: int = 256, n: int = 128
                      ) -> tuple[Program, dict]:
    T = t.tiles
    E = t.element_bytes
    up = lambda x, a: -(-x // a) * a
    code_at, table_at = t.memory_base, t.memory_base + E // 2   # element 0: code, table
    A = t.memory_base + E                        # a[m,k] f16 from element 1 on, region 0
    OUT = A + up(m * k * 2, 64)                  # out[m,n] f16
    RECV = OUT + up(m * n * 2, 64)               # the block received from the previous tile
    B = t.region0_end                            # b[k,n] f16, region 1 (interleaved)
    CP = B + up(k * n * 2, 2 * E)                # copy destination, region 1
    assert RECV + m * n * 2 <= t.region0_end and CP + m * n <= t.memory_end - 256, "shape too big"
    assert n <= k, "the ADD writes m*n elements over a[m,k]"
    nb_out = m * n * 2
    prof = t.memory_end - 256
    code, tables = [], []
    for tile in range(T):
        c = []
        nxt, prv = (tile + 1) % T, (tile - 1) % T
        for r in range(rounds):
            c.append(isa.instr(isa.MATMUL, A, B, OUT, m, k, n, isa.f32_bits(1 / 16), dtype="f16"))
            c.append(isa.instr(isa.SYNC))
            c.append(isa.instr(isa.EXCH, table_at, 1, 1))
            c.append(isa.instr(isa.SYNC))
            c.append(isa.instr(isa.ADD, A, OUT, RECV, 1, m * n, 0, dtype="f16"))
            c.append(isa.instr(isa.COPY, CP, OUT, n, m, n, 2 * n))
            c.append(isa.instr(isa.SYNC))
        c.append(isa.instr(isa.END))
        code.append(np.concatenate(c).astype("<u4").view(np.uint8))
        tables.append(np.array([nxt, OUT, 2 * n, m, 2 * n, prv, RECV, nb_out, 1, 0], "<u4").view(np.uint8))
    off = lambda b: np.r_[0, np.cumsum([len(x) for x in b])].astype(np.int64)
    rng = np.random.default_rng(0)
    w_a = rng.standard_normal(m * k).astype(np.float16).view(np.uint8)
    w_b = (rng.standard_normal((T, k * n)) / 16).astype(np.float16).view(np.uint8).reshape(-1)
    nb = k * n * 2
    hin = [(0, 0, tt, A, 2 * m * k, 1, 0, 0) for tt in range(T)] + \
          [(1, tt * nb, tt, B, nb, 1, nb, nb) for tt in range(T)]
    hout = [(0, tt * nb_out, tt, OUT, nb_out, 1, nb_out, nb_out) for tt in range(T)]
    full = lambda v: np.full(T, v, np.int64)
    p = Program(target=asdict(t), exchange_table_cap=80 * 1024,
                code=np.concatenate(code), code_off=off(code), code_addr=full(code_at),
                table=np.concatenate(tables), table_off=off(tables), table_addr=full(table_at),
                profile_addr=full(prof), profile_bytes=256, in_streams=["a", "b"],
                out_streams={"out": T * nb_out}, host_in=host_table(hin), host_out=host_table(hout))
    return p, {"a": w_a, "b": w_b}


def _panels(w: np.ndarray, P: int) -> np.ndarray:
    """Weight bytes as MATMUL reads b: micro-panel order of height P (0: row-major)."""
    return (isa.panel_order(w, P) if P else w).view(np.uint8).reshape(-1)


def repeat_program(t: Target, iters: int = 27, r: int = 32, h: int = 32) -> tuple[Program, dict]:
    """Every tile: REPEAT iters x [layer body], one weight copy per layer, relocated.
    About 45 body instructions (6 SYNCs) + 4 outside the loop per tile."""
    T, E = t.tiles, t.element_bytes
    code_at, table_at = t.memory_base, t.memory_base + E // 2
    blk = r * h * 2                                      # one f16 [r, h] block
    R0 = t.memory_base + E                               # region-0 activations
    X, XN, Q, S, P, PV, O, ATT, F1, H8, ST = (R0 + i * 2 * blk for i in range(11))
    R1 = t.region0_end
    KV = [R1 + i * blk for i in range(6)]                # K0 V0 (own), K1 V1 (prev), K2 V2 (next)
    WB = R1 + 6 * blk
    wq, wk, wv, wo = (WB + i * h * h * 2 for i in range(4))
    w1 = WB + 4 * h * h * 2                              # fp8 [h, 2h]
    w2 = w1 + h * 2 * h                                  # f16 [h, 2h]: b of a transposed matmul
    layer = w2 + h * 2 * h * 2 - WB
    prof = t.memory_end - 256
    assert ST + 2048 + 2 * h <= t.region0_end and WB + iters * layer <= prof, "shape too big"
    one, sc = isa.f32_bits(1.0), isa.f32_bits(1 / np.sqrt(h))
    P8 = t.amp_panel_elems.get("fp8", 0)                 # the fp8 weight w1 in micro-panels if the target needs it
    I = isa.instr
    body = [I(isa.LAYERNORM, XN, X, ST + 1024, ST + 2048, r, h, isa.f32_bits(1e-5)),
            I(isa.MATMUL, XN, wq, Q, r, h, h, one, dtype="f16"),
            I(isa.MATMUL, XN, wk, KV[0], r, h, h, one, dtype="f16"),
            I(isa.MATMUL, XN, wv, KV[1], r, h, h, one, dtype="f16"),
            I(isa.SYNC),
            I(isa.EXCH, table_at, 2, 2), I(isa.SYNC)]
    for head in range(2):
        for j in range(3):
            body += [I(isa.MATMUL, Q, KV[2 * j], S, r, h, r, one, dtype="f16", flags=isa.F_TRANSPOSE_B),
                     I(isa.ONLINE_SOFTMAX, P, S, ST, r, r, sc, flags=isa.F_FIRST if j == 0 else 0),
                     I(isa.MATMUL, P, KV[2 * j + 1], PV, r, r, h, one, dtype="f16"),
                     I(isa.ROWSCALE, O, O, ST + 8 * r, PV, r, h, flags=isa.F_ADD)]
        body += [I(isa.ROWSCALE, O, O, ST + 4 * r, 0, r, h, flags=isa.F_RECIP),
                 I(isa.ADD, ATT, ATT if head else O, O, 1, r * h, 0, dtype="f16"), I(isa.SYNC)]
    body += [I(isa.MATMUL, ATT, wo, O, r, h, h, one, dtype="f16"),
             I(isa.ADD, X, X, O, 1, r * h, 0, dtype="f16"),
             I(isa.LAYERNORM, XN, X, ST + 1024, ST + 2048, r, h, isa.f32_bits(1e-5)),
             I(isa.CAST, H8, XN, r * h, isa.f32_bits(1 / 16), dtype="fp8", dtype2="f16"),
             I(isa.MATMUL, H8, w1, F1, r, h, 2 * h, isa.f32_bits(16), dtype="fp8", flags=isa.F_PANEL_B if P8 else 0),
             I(isa.GELU, F1, F1, 2 * r * h),
             I(isa.SYNC),
             I(isa.MATMUL, F1, w2, O, r, 2 * h, h, isa.f32_bits(1 / 8), dtype="f16", flags=isa.F_TRANSPOSE_B),
             I(isa.ADD, X, X, O, 1, r * h, 0, dtype="f16"),
             I(isa.SYNC)]
    relocs = [(code_at + (1 + pc) * isa.INSTR_BYTES + 4 * 2, layer)      # word 2 = b
              for pc, w in enumerate(body) if w[0] & 0xFF == isa.MATMUL and int(w[2]) >= WB]
    table_words = 2 * isa.ENTRY_WORDS * 2
    reloc_at = table_at + 4 * table_words
    code = np.concatenate([I(isa.REPEAT, iters, len(body), reloc_at, len(relocs))] + body +
                          [I(isa.SOFTMAX, XN, X, r, h, one), I(isa.SYNC), I(isa.END)]).astype("<u4").view(np.uint8)
    codes, tables = [code] * T, []
    for tile in range(T):
        nxt, prv = (tile + 1) % T, (tile - 1) % T
        tables.append(np.array([nxt, KV[0], 2 * blk, 1, 0, prv, KV[0], 2 * blk, 1, 0,
                                prv, KV[2], 2 * blk, 1, 0, nxt, KV[4], 2 * blk, 1, 0]
                               + [x for e in relocs for x in e], "<u4").view(np.uint8))
    off = lambda b: np.r_[0, np.cumsum([len(x) for x in b])].astype(np.int64)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((T, r * h))).astype(np.float16).view(np.uint8).reshape(-1)
    gb = np.r_[np.ones(h), np.zeros(h)].astype(np.float16).view(np.uint8)
    w = []
    for _ in range(iters):
        w += [(rng.standard_normal(4 * h * h) / np.sqrt(h)).astype(np.float16).view(np.uint8),
              _panels((rng.standard_normal((h, 2 * h)) * 16 / np.sqrt(h)).astype(ml_dtypes.float8_e4m3fn), P8),
              (rng.standard_normal(2 * h * h) / np.sqrt(2 * h)).astype(np.float16).view(np.uint8)]
    w = np.concatenate(w)
    assert len(w) == iters * layer
    nx, nw = r * h * 2, len(w)
    hin = ([(0, tt * nx, tt, X, nx, 1, nx, nx) for tt in range(T)]
           + [(1, 0, tt, WB, nw, 1, nw, nw) for tt in range(T)]
           + [(2, 0, tt, ST + 1024, 2 * h, 1, 2 * h, 2 * h) for tt in range(T)]
           + [(2, 2 * h, tt, ST + 2048, 2 * h, 1, 2 * h, 2 * h) for tt in range(T)])
    hout = [(0, tt * nx, tt, XN, nx, 1, nx, nx) for tt in range(T)]
    full = lambda v: np.full(T, v, np.int64)
    p = Program(target=asdict(t), exchange_table_cap=80 * 1024,
                code=np.concatenate(codes), code_off=off(codes), code_addr=full(code_at),
                table=np.concatenate(tables), table_off=off(tables), table_addr=full(table_at),
                profile_addr=full(prof), profile_bytes=256, in_streams=["x", "w", "gb"],
                out_streams={"out": T * nx}, host_in=host_table(hin), host_out=host_table(hout))
    return p, {"x": x, "w": w, "gb": gb}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    t = Target.load(argv[0] if argv else "ipu21")
    rep = len(argv) > 1 and argv[1] == "repeat"
    rounds = int(argv[2 if rep else 1]) if len(argv) > (2 if rep else 1) else (27 if rep else 3)
    t0 = time.perf_counter()
    p, s = repeat_program(t, rounds) if rep else synthetic_program(t, rounds)
    t1, c1 = time.perf_counter(), time.process_time()
    res = run(p, s)
    t2, c2 = time.perf_counter(), time.process_time()
    ms = res.total_cycles / t.clock_hz * 1e3
    print(f"{t.name}: {t.tiles} tiles, {rounds} {'REPEAT iterations' if rep else 'rounds'}, "
          f"{len(p.code) // t.tiles // isa.INSTR_BYTES} instructions/tile, {len(res.step_kind)} supersteps, "
          f"{res.instructions} instructions, {int(res.exchange_bytes.sum()) / 2**20:.0f} MiB exchanged")
    print(f"simulated: {res.total_cycles} cycles = {ms:.3f} ms (+ host {res.host_cycles} cycles)")
    print(f"host wall: build {t1 - t0:.2f} s, simulate {t2 - t1:.2f} s wall, {c2 - c1:.2f} s CPU")
    return res


if __name__ == "__main__":
    main()

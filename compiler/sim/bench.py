"""Synthetic full-size benchmark: `python -m compiler.sim.bench [target] [rounds]`.

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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    t = Target.load(argv[0] if argv else "ipu21")
    rounds = int(argv[1]) if len(argv) > 1 else 3
    t0 = time.perf_counter()
    p, s = synthetic_program(t, rounds)
    t1, c1 = time.perf_counter(), time.process_time()
    res = run(p, s)
    t2, c2 = time.perf_counter(), time.process_time()
    ms = res.total_cycles / t.clock_hz * 1e3
    print(f"{t.name}: {t.tiles} tiles, {rounds} rounds, {len(res.step_kind)} supersteps, "
          f"{res.instructions} instructions, {int(res.exchange_bytes.sum()) / 2**20:.0f} MiB exchanged")
    print(f"simulated: {res.total_cycles} cycles = {ms:.3f} ms (+ host {res.host_cycles} cycles)")
    print(f"host wall: build {t1 - t0:.2f} s, simulate {t2 - t1:.2f} s wall, {c2 - c1:.2f} s CPU")
    return res


if __name__ == "__main__":
    main()

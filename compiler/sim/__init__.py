"""The tile simulator: the only "hardware" (DESIGN §4).

    run(program, streams) -> SimResult      raises MachineFault when the machine refuses

It sees only the lowered Program (compiler.lower.program) and the host streams
(name -> 1-D uint8 bytes). Tile memory is bytes; tensors exist only at their
placed addresses; every tile fetches its instructions from its own memory.

  memory.py    tile memory, flat positions, chunked gather/scatter movers
  load.py      loading code/tables/profile areas; host in/out streams
  kernels.py   MATMUL / ADD / COPY, batched across tiles; operand rules
  exchange.py  the exchange phase: table decoding, matching, BSP transfer
  run.py       fetch/decode, supersteps, sync, cycles, profile samples
  bench.py     synthetic full-size program: python -m compiler.sim.bench [target] [rounds]

Decisions the machine takes where isa.py is silent (the lowering must match):
  * instruction word 0: bits 16..31 must be 0; SYNC/END/EXCH/COPY take dtype 0;
    ADD takes dtype 0 or f16; MATMUL f16, fp8 (e4m3fn) or f32 (out is always f16,
    computed in f32, times scale, rounded once).
  * MATMUL m, k, n and ADD nelem must be > 0; ADD nsrc1 may be 0 (out = src0);
    with nsrc1 > 1 the ADD stride (bytes) must keep every partial 8-byte aligned.
    A COPY of 0 bytes is a no-op (it still costs the kernel overhead).
  * COPY row_bytes and both strides must be multiples of COPY_WORD even for one
    row (write 0 or row_bytes as the stride of a single row).
  * EXCH table_addr is 4-byte aligned and holds nsend send entries followed by
    nrecv receive entries. A tile may issue several EXCH in one superstep: their
    entries are matched in program order. Exchange entries are only range
    checked (no alignment / region rule). Rows of one receive may overlap: the
    later row wins. A superstep may hold EXCH on some tiles and kernels on
    others (never both on one tile): the exchange happens after the compute.
  * Cycles: a tile's sample is its kernels' cycles, or the whole exchange-phase
    cost if it issued EXCH (0 if idle); step cycles = max over tiles + sync.
    A superstep is counted when any tile executes anything before its SYNC/END
    (a final END-only step is not a superstep). Samples past profile_bytes are
    not written; tile_cycles for those steps come from the machine's counters
    (SimResult.profiled_steps says how many were read back).
  * host_cycles = ceil(in bytes / host_bytes_per_cycle) + ceil(out bytes / ...).
  * Program.tiles must equal the target's tiles.
"""
from .fault import MachineFault
from .run import SimResult, run

__all__ = ["MachineFault", "SimResult", "run"]

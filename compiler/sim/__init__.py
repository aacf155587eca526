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
"""
from .fault import MachineFault
from .run import SimResult, run

__all__ = ["MachineFault", "SimResult", "run"]

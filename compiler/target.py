"""The machine: memory map, regions, elements and cost figures.

One source of truth for the planner, the allocator, the lowering and the
simulator (docs/architecture.md §2). Every phase reads the machine through `Target`, so a new
IPU generation is a new YAML file under conf/target/.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from .costs import DTYPE_BYTES, amp, merge, vector, vertices  # DTYPE_BYTES: defined once, there; phases read it here

# Region classes of an allocation request (also used by the ISA operand specs).
STANDARD = 0     # either region
INTERLEAVED = 1  # region 1 only: 128-bit loads need the interleaved region
CODE = 2         # region 0 only: instructions may be fetched only from there
REGION_CLASS_NAMES = {STANDARD: "standard", INTERLEAVED: "interleaved", CODE: "code"}



class ConfigError(ValueError):
    """Bad configuration or input: the message names the file/key at fault."""


@dataclass(frozen=True)
class Target:
    name: str
    tiles: int
    workers: int
    memory_base: int
    region0_end: int
    memory_end: int
    element_bytes: int
    clock_hz: float
    amp_macs_per_cycle: dict
    amp_panel_elems: dict     # b dtype -> micro-panel height: MATMUL reads such b only as panels
    amp_in_group: dict        # dtype -> input channels (k) one AMP pass consumes
    amp_out_group: dict       # dtype -> output channels (n) one AMP pass produces
    amp_weight_load_bytes_per_cycle: int   # convUnitCoeffLoadBytesPerCycle: loading a pass's weights
    vector_bytes_per_cycle: int
    copy_bytes_per_cycle: int
    kernel_overhead_cycles: int
    exchange_bytes_per_cycle: int
    exchange_phase_cycles: int
    sync_cycles: int
    host_bytes_per_cycle: int
    transcendental_elems_per_cycle: int

    @classmethod
    def from_dict(cls, d: dict, where: str = "target") -> "Target":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown config key {where}.{unknown[0]}")
        missing = sorted(names - set(d))
        if missing:
            raise ConfigError(f"missing config key {where}.{missing[0]}")
        t = cls(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()})
        t._check(where)
        return t

    @classmethod
    def load(cls, name_or_path: str) -> "Target":
        p = Path(name_or_path)
        if not p.suffix:
            p = Path(__file__).resolve().parent.parent / "conf" / "target" / f"{name_or_path}.yaml"
        return cls.from_dict(yaml.safe_load(p.read_text()), where=str(p))

    def _check(self, where: str) -> None:
        e = self.element_bytes
        ok = (self.tiles > 0 and e > 0 and self.memory_base % e == 0
              and self.memory_base < self.region0_end < self.memory_end
              and (self.region0_end - self.memory_base) % e == 0
              and (self.memory_end - self.region0_end) % (2 * e) == 0)
        if not ok:
            raise ConfigError(f"{where}: inconsistent memory map (regions must be whole elements, "
                              f"region 1 whole element pairs)")
        for d, r in self.amp_macs_per_cycle.items():   # a pass's row: in x out MACs in whole cycles
            if r <= 0 or (self.amp_in_group[d] * self.amp_out_group[d]) % r:
                raise ConfigError(f"{where}: amp_macs_per_cycle.{d} must divide amp_in_group.{d} x "
                                  f"amp_out_group.{d} (the AMP's cycles per row)")

    # ---- memory map -------------------------------------------------------
    @property
    def tile_bytes(self) -> int:
        return self.memory_end - self.memory_base

    @property
    def region0_bytes(self) -> int:
        return self.region0_end - self.memory_base

    @property
    def region1_bytes(self) -> int:
        return self.memory_end - self.region0_end

    @property
    def max_alloc_bytes(self) -> int:
        """Largest contiguous allocation: an allocation never straddles regions."""
        return max(self.region0_bytes, self.region1_bytes)

    def region_of(self, addr):
        """0 for region 0, 1 for region 1 (works on numpy arrays)."""
        return (addr >= self.region0_end) * 1

    def bank_unit(self, addr):
        """Memory-element unit an address falls in. In region 1 the unit is an
        element pair (64-bit words interleave across the pair)."""
        r0 = (self.region0_end - self.memory_base) // self.element_bytes
        in_r1 = addr >= self.region0_end
        u0 = (addr - self.memory_base) // self.element_bytes
        u1 = r0 + (addr - self.region0_end) // (2 * self.element_bytes)
        return u1 * in_r1 + u0 * (1 - in_r1)

    # ---- costs --------------------------------------------------------------
    def amp_dtype(self, dtype: str, dtype_a: str | None = None) -> str:
        """The type the AMP runs a product in: the slower operand's (FP8 speed needs
        both operands FP8); b's on a tie."""
        a = dtype_a or dtype
        return a if self.amp_macs_per_cycle[a] < self.amp_macs_per_cycle[dtype] else dtype

    def matmul_cycles(self, m, k, n, dtype: str, dtype_a: str | None = None, f32_out=False):
        """PopLibs' estimate of the AMP vertex (ConvPartial1x1Out) for this product, term
        by term in compiler/costs/amp.py: 6 workers splitting the m rows, per-pass worker
        loops, partials zeroing, weight loads per pass over whole channel groups (a ragged
        block pays for the padding), supervisor loops, the f32 -> f16 output cast.
        Accepts numpy arrays for m, k, n. f32_out: f32 partials (no cast; isa.F_F32_OUT)."""
        return amp.matmul_cycles(self, m, k, n, self.amp_dtype(dtype, dtype_a), f32_out)

    # Kernel costs below accept numpy arrays (the simulator applies them to whole batches).
    # Each is the sum of the popops / popnn vertex estimates for the kernel (the vertices:
    # compiler/costs/vertices.py; which ones each kernel runs: compiler/costs/vector.py).
    def gelu_cycles(self, nelem):
        """popnn's GELU non-linearity vertex (NonLinearitySupervisor)."""
        return vector.gelu_cycles(nelem, self.workers, self.vector_bytes_per_cycle)

    def softmax_cycles(self, rows, cols, scaled=True, deferred=False):
        """popnn's stable softmax: scale (only where `scaled`: the scale is not 1.0), row max,
        subtract, exp, row sum, reciprocal, multiply (the last two not where `deferred`)."""
        return vector.softmax_cycles(rows, cols, self.workers, self.vector_bytes_per_cycle, scaled, deferred)

    def online_softmax_cycles(self, rows, cols):
        """One flash-attention key block: the softmax steps plus the f32 state updates."""
        return vector.online_softmax_cycles(rows, cols, self.workers, self.vector_bytes_per_cycle)

    def layernorm_cycles(self, rows, cols, flags=0):
        """popnn's layer norm: two row reductions, the statistics, whitening, gamma and beta;
        flags (isa.F_LN_STATS 1, F_LN_HALF 2): a row half's part of it (policy.ln_halves)."""
        return vector.layernorm_cycles(rows, cols, self.workers, self.vector_bytes_per_cycle, flags)

    def cast_cycles(self, nelem, src_bytes, dst_bytes):
        """popops' Cast1D estimate (compiler/costs/vertices.py); accepts numpy arrays."""
        return vertices.cast_cycles(nelem, src_bytes, dst_bytes, self.workers, self.vector_bytes_per_cycle)

    def bias_cycles(self, rows, cols):
        """popops' BroadcastVectorInner1D ADD estimate (compiler/costs/vertices.py)."""
        return vertices.bias_cycles(rows, cols, self.workers, self.vector_bytes_per_cycle)

    def rowscale_cycles(self, rows, cols, add, recip):
        """(UnaryOp1D INVERSE f32 with F_RECIP) + Cast1D of the row vector to half +
        BroadcastVectorOuterByRow MULTIPLY (+ BinaryOp1D ADD with F_ADD)."""
        return vector.rowscale_cycles(rows, cols, add, recip, self.workers, self.vector_bytes_per_cycle)

    def merge_cycles(self, rows, cols, splits):
        """MERGE of `splits` split-key attention partial states (compiler/costs/merge.py: popops
        vertices for the f32 statistics, a Cast1D, a by-row MULTIPLY, ADD's reduction, ROWSCALE)."""
        return merge.merge_cycles(rows, cols, splits, self.workers, self.vector_bytes_per_cycle, self.copy_cycles)

    def add_cycles(self, nelem, nsrc1, f32_src=False):
        """ADD of 1 + nsrc1 f16 sources (compiler/costs/vector.py: popops' BinaryOp1D for two, its
        strided reduction otherwise); f32_src: f32 partials to f16 (ReduceAdd<half, float>)."""
        return vector.add_cycles(nelem, nsrc1, self.workers, self.vector_bytes_per_cycle, f32_src)

    def vector_cycles(self, nbytes):
        return self.kernel_overhead_cycles + -(-nbytes // self.vector_bytes_per_cycle)

    def copy_cycles(self, nbytes):
        return self.kernel_overhead_cycles + -(-nbytes // self.copy_bytes_per_cycle)

    def host_cycles(self, nbytes_in: int, nbytes_out: int) -> int:
        """Bytes over the chip's one host link, each way at host_bytes_per_cycle."""
        hb = self.host_bytes_per_cycle
        return math.ceil(nbytes_in / hb) + math.ceil(nbytes_out / hb)

    def exchange_cycles(self, send_bytes, recv_bytes) -> int:
        """One exchange phase from per-tile byte counts (numpy arrays, length tiles):
        every tile sends at most, and receives at most, exchange_bytes_per_cycle,
        whatever its neighbours do (no pair of tiles shares a faster bus); the phase
        lasts as long as its busiest sender or receiver, plus the fixed cost."""
        import numpy as np
        worst = max(int(np.max(send_bytes, initial=0)), int(np.max(recv_bytes, initial=0)))
        return self.exchange_phase_cycles + math.ceil(worst / self.exchange_bytes_per_cycle)

"""Compiler policy: caps and the named heuristic flags (all on by default, so an
ablation is one override)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from .target import ConfigError


CHECKS = ("rows", "all", "last_iteration", "sampled")   # policy.check: the Repeat iterations run reads back
OBJECTIVES = ("throughput", "latency")                  # policy.objective (pipeline_groups=auto: compiler/family.py)


@dataclass(frozen=True)
class Policy:
    exchange_table_cap: int = 81920   # encoded exchange-table bytes per tile (80 KiB)
    plan_candidates: int = 8          # ranked plan candidates handed to expand
    plan_beam: int = 64               # plan's beam width over the graph; 0 = no beam (rank-aligned grids)
    serial_passes: int = 4            # also plan matmuls as 2, 4, .. (up to this) serial row passes; 1 = off
    finalists: int = 2                # expanded candidates admitted to placement
    compose_candidates: bool = True   # also try each matmul's measured-cheapest grid, mixed
    diverse_finalists: bool = True    # finalists all of one grid shape: also place the best of another shape, last (expand.alike_retry)
    lean_candidates: bool = True      # also plan grids leaving a tile's support when the best would not (plan.with_lean)
    home_rotation: bool = True        # rotate parameter homes away from input homes
    vector_homes: bool = True         # vectors (LayerNorm γ, β): replicated homes of 256-byte shards
    single_vector_homes: bool = True  # with broadcast_sends, a vector home holds each shard once (no replicas): one multicast serves every consumer, a replica only takes memory (27 So400m layers: ~29 KB a tile; expand/balance.py vector_shards)
    balanced_homes: bool = True       # the home rotation also spreads vectors' shard homes, from the ring / resident homes' load (expand/balance.py)
    weight_stationary: bool = True    # also expand each candidate with weights resident where used
    resident_replication: int = 0     # most tiles holding one resident weight block (a grid's gm); 0 = any
    panel_homes: bool = True          # store weights the AMP reads as micro-panels (FP8) in that order
    operand_relay: bool = True        # plan may spread a matmul's A over idle tiles before gathering it (plan/relay.py)
    broadcast_sends: bool = True      # one step's same source range to several tiles is one multicast send (isa.MCAST), its sender charged once; plan and expand price it so (experiments/comm/README.md)
    early_gathers: bool = True        # expand moves a matmul's B (bias, LayerNorm parameter) gather to an earlier exchange step with room (expand/early.py)
    early_fit: bool = True            # ... only where every tile it lengthens a buffer on stays within the tile, else the next best step (expand/early.py)
    split_gathers: bool = False       # expand spreads a B (bias, LayerNorm parameter) gather's transfers over earlier exchange steps, each part where its tiles have room (expand/split.py)
    ring_homes: bool = True           # plan may home a weight on its matmul's grid, blocks in pieces over the gm tiles reading them (plan/ring.py)
    ring_copies: int = 2              # ring homes: plan may hold each piece on up to this many of the gm tiles (fewer bytes received, more held); 1 = once
    ring_in_place: bool = False       # ring homes: plan may also cut pieces in whole AMP channel groups that the MATMUL reads where they live (b in segments, isa.F_SEG_B): no local COPY (plan/ring.py); off until placement copes with it at depth (experiments/comm/README.md)
    ring_units: bool = True           # ring homes: plan may also cut pieces in 2-D units (whole in-channel groups and panels x out-channel groups) that the MATMUL reads where they live as rectangles (isa.F_SEG_2D): no local COPY, pieces as even as the copying ring's (plan/ring.py unit_pieces, expand/ring2d.py); plan's estimate counts their pooled request in whole element pairs (plan/budgets.py pair_padding) (experiments/comm/README.md)
    attn_variants: int = 1            # plan also hands expand the best candidate with each grouped (attention) matmul's next-best grids, in context and standalone (plan/attn.py); 0 = off
    row_calls: bool = True            # expand issues a LayerNorm / softmax over a tile's rows as the row chunks its cost says are cheapest (2-5 rows idle PopLibs' by-row workers; plan/rowcalls.py); the plan prices the same chunks
    ln_halves: bool = True            # plan may lay a LayerNorm over row halves on two tiles: each reduces its half (LAYERNORM F_LN_STATS), one exchange swaps the f32 statistics, each normalises its half (F_LN_HALF); the beam prices both layouts (plan/lnhalves.py)
    deferred_norm: bool = True        # a materialized attention's SOFTMAX leaves rows unnormalised (isa.F_SM_DEFER, f32 row sums beside them) and p·v's output rows are divided by the sums after it (ROWSCALE F_RECIP on d columns, not T keys; compiler/deferred_norm.py); plan prices both kernels
    carried_in_place: bool = True     # the Repeat body's carried output (the layer's last residual add) is written into its input's blocks when they are alike: no end-of-body exchange copying it there (expand/graph.py carried_in_place)
    f32_partials: bool = False        # a k-split's MATMULs write f32 partials (no output cast), exchanged as f32 and reduced by one ADD that rounds once to f16 (PopLibs' float conv partials); plan prices it (plan/matmul.py partial_bytes)
    flash_merge: bool = True          # split-key (flash) attention merges its key splits' partial states with one MERGE kernel (expand/flash_merge.py); off: ONLINE_SOFTMAX / ROWSCALE / ADD calls (flash_combine.py)
    grid: str = ""                    # force one GEMM grid "GMxGNxGK[/SP]" (tests, studies); "" = search
    check: str = "rows"               # run's read-back op by op: rows (every iteration, sampled rows) | all | last_iteration | sampled
    check_exchanges: bool = True      # run: every exchange's destination bytes against its source's, every iteration
    pipeline_groups: int | str = 0    # the spatial pipeline (compiler/spatial.py): the encoder's layers in this many groups of tiles, the batch one item streaming through; 0 = off; auto = the whole chip or G groups, chosen by cost (compiler/family.py)
    pipeline_max_groups: int = 4      # auto: price G groups for every G dividing the layers up to this
    pipeline_fit: bool = True         # a group that does not fit on tiles // G: each group its fewest tiles, the rest shared (compiler/spatial_tiles.py)
    objective: str = "throughput"     # auto: throughput (most images/s) | latency (least ms first image in to last output out)
    place: dict = field(default_factory=dict)  # compiler.place.PlaceConfig overrides
    fp8_budget_embedding: float = 0.03  # FP8 activations: the run's embedding / logits rms vs the FP16-activation twin
    fp8_budget_features: float = 0.05   # ... and its features' (experiments/model_margin: So400m 4 layers, astronaut)

    @classmethod
    def from_dict(cls, d: dict) -> "Policy":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown config key policy.{unknown[0]}")
        p = cls(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()})
        for k in ("exchange_table_cap", "plan_candidates", "finalists", "serial_passes", "ring_copies"):
            v = getattr(p, k)
            if not isinstance(v, int) or v <= 0:
                raise ConfigError(f"policy.{k}={v!r}: must be a positive integer")
        if p.pipeline_groups == 1:
            raise ConfigError("policy.pipeline_groups=1: a pipeline has at least 2 groups (0 = off)")
        if p.objective not in OBJECTIVES:
            raise ConfigError(f"policy.objective={p.objective!r}: expected {', '.join(OBJECTIVES)}")
        if not isinstance(p.pipeline_max_groups, int) or isinstance(p.pipeline_max_groups, bool) \
                or p.pipeline_max_groups < 2:
            raise ConfigError(f"policy.pipeline_max_groups={p.pipeline_max_groups!r}: must be an integer >= 2")
        if isinstance(p.pipeline_groups, str) and p.pipeline_groups != "auto":
            raise ConfigError(f"policy.pipeline_groups={p.pipeline_groups!r}: expected a group count (0 = off) or auto")
        auto = p.pipeline_groups == "auto"
        for k in ("plan_beam", "resident_replication", "attn_variants") + (() if auto else ("pipeline_groups",)):
            v = getattr(p, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"policy.{k}={v!r}: must be a non-negative integer")
        for k in ("fp8_budget_embedding", "fp8_budget_features"):
            v = getattr(p, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"policy.{k}={v!r}: must be a positive number (an rms relative error)")
        if p.check not in CHECKS:
            raise ConfigError(f"policy.check={p.check!r}: expected {', '.join(CHECKS)}")
        if p.grid and not p.grid_dims:
            raise ConfigError(f"policy.grid={p.grid!r}: expected GMxGNxGK or GMxGNxGK/SP (serial passes), "
                              f"e.g. 2x4x2 or 2x4x2/2")
        return p

    @property
    def passes(self) -> tuple[int, ...]:
        """Serial pass counts plan considers: 1, 2, 4, .. up to serial_passes."""
        return tuple(1 << i for i in range(self.serial_passes.bit_length()) if 1 << i <= self.serial_passes)

    @property
    def grid_dims(self) -> tuple[int, ...]:
        """(gm, gn, gk, serial passes) of policy.grid "GMxGNxGK[/SP]"; () if unset or malformed."""
        if not self.grid:
            return ()
        dims, _, sp = self.grid.lower().partition("/")
        try:
            d = tuple(int(x) for x in dims.split("x")) + (int(sp or 1),)
        except ValueError:
            return ()
        return d if len(d) == 4 else ()

"""A multi-chip target: N identical chips (each a `Target`) in a chain joined by IPU-Links
(DESIGN.md §7a "Beyond one chip"). conf/target/pod2.yaml is ipu21's figures (Hydra defaults)
plus a `pod:` mapping read here; the single-chip phases never see that key (phases.target_of
drops it), so each chip is compiled by them unchanged.

    pod:
      chips: 2                 # chips in the chain: stage k runs on chip k
      links: [6]               # IPU-Links between chip k and chip k+1 (one entry per boundary)
      link_bytes_per_s: ...    # one link, one direction
      link_latency_cycles: ... # first byte out to first byte in
      weight_budget: 0.6       # share of a chip's SRAM a stage's parameters may take (the split's memory screen)
      layers: []               # force the split: encoder layers per chip; [] = chosen by cost and memory
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..target import ConfigError

KEY = "pod"


@dataclass(frozen=True)
class Pod:
    chips: int
    links: tuple
    link_bytes_per_s: int
    link_latency_cycles: int
    weight_budget: float
    layers: tuple = ()

    @classmethod
    def from_dict(cls, d: dict, where: str = "target.pod") -> "Pod":
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: expected a mapping (chips, links, link_bytes_per_s, ...)")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown config key {where}.{unknown[0]}")
        missing = sorted(names - set(d) - {"layers"})
        if missing:
            raise ConfigError(f"missing config key {where}.{missing[0]}")
        p = cls(chips=d["chips"], links=tuple(d["links"]), link_bytes_per_s=d["link_bytes_per_s"],
                link_latency_cycles=d["link_latency_cycles"], weight_budget=d["weight_budget"],
                layers=tuple(d.get("layers") or ()))
        p._check(where)
        return p

    def _check(self, where: str) -> None:
        ints = lambda v: isinstance(v, int) and not isinstance(v, bool)
        if not ints(self.chips) or self.chips < 2:
            raise ConfigError(f"{where}.chips={self.chips!r}: must be an integer >= 2 (one chip: target=ipu21)")
        if len(self.links) != self.chips - 1 or not all(ints(n) and n > 0 for n in self.links):
            raise ConfigError(f"{where}.links={list(self.links)}: one positive link count per boundary "
                              f"({self.chips - 1} for {self.chips} chips)")
        if not ints(self.link_bytes_per_s) or self.link_bytes_per_s <= 0:
            raise ConfigError(f"{where}.link_bytes_per_s={self.link_bytes_per_s!r}: must be a positive integer")
        if not ints(self.link_latency_cycles) or self.link_latency_cycles < 0:
            raise ConfigError(f"{where}.link_latency_cycles={self.link_latency_cycles!r}: must be an integer >= 0")
        if not isinstance(self.weight_budget, (int, float)) or not 0 < self.weight_budget <= 1:
            raise ConfigError(f"{where}.weight_budget={self.weight_budget!r}: must be in (0, 1]")
        if self.layers and (len(self.layers) != self.chips or not all(ints(n) and n > 0 for n in self.layers)):
            raise ConfigError(f"{where}.layers={list(self.layers)}: one positive layer count per chip, or []")


def chip_dict(target: dict) -> dict:
    """The single-chip part of a target config (every key but `pod`)."""
    return {k: v for k, v in target.items() if k != KEY}


def pod_of(target: dict) -> Pod | None:
    """The pod of a target config, None for one chip."""
    return Pod.from_dict(target[KEY]) if KEY in target else None

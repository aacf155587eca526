"""Graph builders. `build(cfg)` returns (Graph, host data by tensor name)."""
from __future__ import annotations

from ..target import ConfigError
from . import attention, gemm, mlp, vit

MODELS = {"gemm": gemm.build, "mlp": mlp.build, "attention": attention.build, "flash_attention": attention.build, "vit": vit.build}


def build(cfg: dict):
    name = cfg.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name={name!r}: not one of {', '.join(MODELS)}")
    return MODELS[name](dict(cfg))

"""Graph builders. `build(cfg)` returns (Graph, host data by tensor name)."""
from __future__ import annotations

from ..target import ConfigError
from . import attention, gemm, mlp, vit
from .vit_config import VitConfig

MODELS = {"gemm": gemm.build, "mlp": mlp.build, "attention": attention.build, "flash_attention": attention.build, "vit": vit.build}
CONFIGS = {"gemm": gemm.GemmConfig, "mlp": mlp.MlpConfig, "attention": attention.AttentionConfig,
           "flash_attention": attention.AttentionConfig, "vit": VitConfig}


def check(cfg: dict) -> None:
    """Every key and value of model `cfg`, without building the graph (raises ConfigError,
    or TypeError for a value of the wrong type)."""
    from .config import model_config
    name = cfg.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name={name!r} is not one of {', '.join(MODELS)}")
    model_config(CONFIGS[name], dict(cfg))


def build(cfg: dict):
    name = cfg.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name={name!r}: not one of {', '.join(MODELS)}")
    return MODELS[name](dict(cfg))

"""Graph builders. `build(cfg)` returns (Graph, host data by tensor name).

The builders' modules are imported when a model is built or checked, that model's only:
every stage checks the config (pipeline/config.py) and most never build a graph, so they
need not pay for gemm's ml_dtypes (FP8), numba or compiler.exact (~1 CPU s a process)."""
from __future__ import annotations

import importlib

from ..target import ConfigError

# model.name -> (module, builder, config class)
_MODELS = {"gemm": ("gemm", "build", "GemmConfig"), "mlp": ("mlp", "build", "MlpConfig"),
           "attention": ("attention", "build", "AttentionConfig"),
           "flash_attention": ("attention", "build", "AttentionConfig"),
           "vit": ("vit", "build", "VitConfig")}
MODELS = tuple(_MODELS)
_CONFIG_MODULE = {"vit": "vit_config"}          # VitConfig lives apart from the builder (vit.py)


def _attr(module: str, name: str):
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def config_class(name: str):
    """The config dataclass of model `name` (its module imported now)."""
    mod, _, cls = _MODELS[name]
    return _attr(_CONFIG_MODULE.get(name, mod), cls)


def check(cfg: dict) -> None:
    """Every key and value of model `cfg`, without building the graph (raises ConfigError,
    or TypeError for a value of the wrong type)."""
    from .config import model_config
    name = cfg.get("name")
    if name not in _MODELS:
        raise ConfigError(f"model.name={name!r} is not one of {', '.join(MODELS)}")
    model_config(config_class(name), dict(cfg))


def build(cfg: dict):
    name = cfg.get("name")
    if name not in _MODELS:
        raise ConfigError(f"model.name={name!r}: not one of {', '.join(MODELS)}")
    mod, fn, _ = _MODELS[name]
    return _attr(mod, fn)(dict(cfg))

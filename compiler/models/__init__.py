"""Graph builders. `build(cfg)` returns (Graph, host data by tensor name).

A builder's module is imported when its model is built or checked, that model's only: every
stage checks the config (pipeline/config.py) and most never build a graph, so they need not
pay for gemm's ml_dtypes (FP8), numba or compiler.exact (~1.9 CPU s a process with the
input photo's decoding, which pipeline/config.py now leaves to the stages that read it)."""
from __future__ import annotations

import importlib

from ..target import ConfigError


def _module(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def _builder(module: str):
    """model `module`'s build(cfg), its module imported when first called."""
    def build(cfg):
        return _module(module).build(cfg)
    build.__qualname__ = f"{module}.build"
    return build


MODELS = {"gemm": _builder("gemm"), "mlp": _builder("mlp"), "attention": _builder("attention"),
          "flash_attention": _builder("attention"), "vit": _builder("vit")}
# model.name -> (module, config class): VitConfig lives apart from its builder (vit.py)
_CONFIGS = {"gemm": ("gemm", "GemmConfig"), "mlp": ("mlp", "MlpConfig"), "attention": ("attention", "AttentionConfig"),
            "flash_attention": ("attention", "AttentionConfig"), "vit": ("vit_config", "VitConfig")}


def config_class(name: str):
    """The config dataclass of model `name` (its module imported now)."""
    module, cls = _CONFIGS[name]
    return getattr(_module(module), cls)


def check(cfg: dict) -> None:
    """Every key and value of model `cfg`, without building the graph (raises ConfigError,
    or TypeError for a value of the wrong type)."""
    from .config import model_config
    name = cfg.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name={name!r} is not one of {', '.join(MODELS)}")
    model_config(config_class(name), dict(cfg))


def build(cfg: dict):
    name = cfg.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name={name!r}: not one of {', '.join(MODELS)}")
    return MODELS[name](dict(cfg))

"""Typed model configs from plain dicts, with errors that name the key."""
from __future__ import annotations

from dataclasses import fields

from ..target import ConfigError


def model_config(cls, cfg: dict):
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(cfg) - names)
    if unknown:
        raise ConfigError(f"unknown config key model.{unknown[0]} (model {cfg.get('name')!r} "
                          f"takes {', '.join(sorted(names))})")
    c = cls(**cfg)
    c.check()
    return c

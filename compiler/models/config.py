"""Typed model configs from plain dicts, with errors that name the key."""
from __future__ import annotations

from dataclasses import fields

from ..target import ConfigError

SEED_END = 1 << 63


def model_config(cls, cfg: dict):
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(cfg) - names)
    if unknown:
        raise ConfigError(f"unknown config key model.{unknown[0]} (model {cfg.get('name')!r} "
                          f"takes {', '.join(sorted(names))})")
    c = cls(**cfg)
    seed = getattr(c, "seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_END:
        raise ConfigError(f"model.seed={seed!r}: must be an integer in [0, 2^63) (numpy's seed sequence "
                          f"takes no negative seed)")
    try:
        c.check()
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return c


def check_positive(c, *names):
    for d in names:
        v = getattr(c, d)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ConfigError(f"model.{d}={v!r}: must be a positive integer")

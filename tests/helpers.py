"""Shared test helpers: configs for in-process trials."""
from __future__ import annotations

import yaml

from conftest import REPO


def target_cfg(name: str = "tiny") -> dict:
    return yaml.safe_load((REPO / "conf" / "target" / f"{name}.yaml").read_text())


def cfg(target: str = "tiny", policy: dict | None = None, **model) -> dict:
    m = dict(name="gemm", m=32, k=64, n=64, dtype="f16", seed=0)
    m.update(model)
    return dict(model=m, target=target_cfg(target), policy=dict(policy or {}))

"""Trial configuration: the composed params.yaml (what `dvc repro` reads) and the
Hydra composition of conf/ (what `dvc exp run -S` and `python -m pipeline.trial` use).

    python -m pipeline.config write     regenerate params.yaml from conf/ defaults
    python -m pipeline.config check     fail if params.yaml differs from that composition
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from compiler.phases import place_config, policy_of, target_of
from compiler.target import ConfigError

from .fanout import ExecutorConfig

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
PARAMS = REPO / "params.yaml"
GROUPS = ("model", "target", "policy", "executor")
TOP_KEYS = set(GROUPS) | {"store"}


def compose(overrides: list[str] | None = None) -> dict:
    """conf/ composed with Hydra overrides, as plain data."""
    from hydra import compose as hcompose, initialize_config_dir
    from omegaconf import OmegaConf
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = hcompose(config_name="config", overrides=list(overrides or []))
    return OmegaConf.to_container(cfg, resolve=True)


def load_params(path: Path | str = PARAMS) -> dict:
    path = Path(path)
    try:
        cfg = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found (run from the repository root)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: expected a mapping of groups {', '.join(GROUPS)}")
    return validate(cfg, str(path))


def validate(cfg: dict, where: str = "config") -> dict:
    """Check every group up front so a bad key fails fast, naming the key."""
    unknown = sorted(set(cfg) - TOP_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown config key {unknown[0]!r}")
    for g in GROUPS:
        if not isinstance(cfg.get(g), dict):
            raise ConfigError(f"{where}: missing config group {g!r}")
    target_of(cfg)
    policy_of(cfg)
    try:
        place_config(cfg)
        ExecutorConfig.from_dict(cfg["executor"])
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    from compiler.models import MODELS
    if cfg["model"].get("name") not in MODELS:
        raise ConfigError(f"{where}: model.name={cfg['model'].get('name')!r} is not one of {', '.join(MODELS)}")
    return cfg


def dump(cfg: dict) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    cfg = compose(argv[1:])
    if cmd == "write":
        PARAMS.write_text(dump(cfg))
        print(f"wrote {PARAMS.name}")
        return 0
    if cmd == "check":
        if yaml.safe_load(PARAMS.read_text()) != cfg:
            print(f"{PARAMS.name} differs from the composition of conf/: run `python -m pipeline.config write`",
                  file=sys.stderr)
            return 1
        print(f"{PARAMS.name} equals the composition of conf/")
        return 0
    print("usage: python -m pipeline.config write|check [overrides...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Trial configuration: the composed params.yaml (what `dvc repro` reads) and the
Hydra composition of conf/ (what `dvc exp run -S` and `python -m pipeline.trial` use).

    python -m pipeline.config write [overrides]     regenerate params.yaml from conf/ defaults
    python -m pipeline.config check                 fail if params.yaml differs from that composition
    python -m pipeline.config validate [overrides]  check every key and value (of params.yaml, or of
                                                    conf/ with the overrides), one line on error

The file reads: compose, load_params; validate (every group) and check_model / check_model_inputs
(the model's keys, then what they point at and cost: compiler/models/precheck.py); trials_of and
check_overrides (every point of a sweep, used by pipeline.trial too: it imports them from here,
never the reverse); the `config` stage (check_stage); the CLI.
"""
from __future__ import annotations

import argparse
import hashlib
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


def load_params(path: Path | str = PARAMS, inputs: bool = True) -> dict:
    """params.yaml, every key and value checked; `inputs`: also what the model's keys point at
    (validate). A stage that reads only artifacts passes False: the config stage, which DVC
    runs first, and the model stage, which reads them, check the files; decoding the input
    photo alone imports scikit-image and scipy (~0.5 CPU s in every stage process)."""
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
    return validate(cfg, str(path), inputs)


def validate(cfg: dict, where: str = "config", inputs: bool = True) -> dict:
    """Check every group up front so a bad key fails fast, naming the key; `inputs`: also
    the files and host memory the model's keys imply (check_model_inputs)."""
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
    check_model(cfg["model"], where, inputs)
    return cfg


def check_model(model: dict, where: str, inputs: bool = True) -> None:
    """Every model key and value, without building the graph (the model phase would raise the
    same errors, but only after DVC had deleted its outputs)."""
    from compiler import models
    if model.get("name") not in models.MODELS:
        raise ConfigError(f"{where}: model.name={model.get('name')!r} is not one of {', '.join(models.MODELS)}")
    check_preprocessing(model, where)
    try:
        models.check(model)
    except TypeError as e:      # a value of the wrong type reaching the dataclass
        raise ConfigError(f"{where}: model: {e}") from None
    if inputs:
        check_model_inputs(model)


def check_model_inputs(model: dict) -> None:
    """What the model's keys point at and what they cost, before any stage writes: the host
    memory the model and reference phases would hold (a lower estimate, against what the
    machine has available), then the weights file's tensors (headers only) and the input
    decoded (compiler/models/precheck.py). Each one line naming the key."""
    import psutil
    from compiler.models import precheck
    keys, parts = precheck.host_bytes(model)
    need, avail = sum(parts.values()), psutil.virtual_memory().available
    if need > avail:
        big = ", ".join(f"{k} {precheck.size_text(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]))
        raise ConfigError(f"{keys}: the model and reference phases would hold at least "
                          f"{precheck.size_text(need)} of host memory ({big}), more than the "
                          f"{precheck.size_text(avail)} available")
    if model.get("name") == "vit":
        precheck.check_weights(model)
        precheck.check_input(model)


def trials_of(args: list[str], multirun: bool) -> list[list[str]]:
    """The trials an override list stands for: one, or a multirun's cartesian product
    (comma lists, range(), choice(); Hydra's own hydra.* overrides left out)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    ovr = [a for a in args if not a.startswith("-") and not a.startswith("hydra.")]
    bad = [a for a in ovr if "=" not in a and not a.startswith("~")]
    if bad:
        raise ConfigError(f"override {bad[0]!r} is not key=value")
    try:
        parsed = OverridesParser.create().parse_overrides(ovr)
    except Exception as e:
        raise ConfigError(f"overrides: {str(e).splitlines()[0]}") from None
    trials = [[]]
    for o in parsed:
        if not o.is_sweep_override():
            trials = [t + [o.input_line] for t in trials]
            continue
        if not multirun:
            raise ConfigError(f"override {o.input_line!r} is a sweep: add --multirun")
        try:
            values = list(o.sweep_string_iterator())
        except Exception as e:
            raise ConfigError(f"override {o.input_line!r}: {str(e).splitlines()[0]}") from None
        trials = [t + [f"{o.get_key_element()}={v}"] for t in trials for v in values]
    return trials


def check_overrides(args: list[str], multirun: bool = False) -> None:
    """Every key and value of every trial the overrides stand for, before Hydra creates any
    output directory: one line on the first bad one (Hydra's own messages are multi-line)."""
    for t in trials_of(args, multirun):
        groups = [o for o in t if o.partition("=")[0].lstrip("+~") in GROUPS]
        keys = [o.partition("=")[0] for o in t if o not in groups and not o.startswith(("+", "~"))]
        try:
            cfg = compose(groups)
        except Exception as e:
            raise ConfigError(f"override {' '.join(groups)}: {str(e).splitlines()[0]}") from None
        for k in keys:
            node = cfg
            for part in k.split("."):
                if not isinstance(node, dict) or part not in node:
                    raise ConfigError(f"unknown config key {k!r}" + (f" (with {' '.join(groups)})" if groups else ""))
                node = node[part]
        try:
            cfg = compose(t)
        except Exception as e:
            raise ConfigError(f"override {' '.join(t)}: {str(e).splitlines()[0]}") from None
        validate(cfg, "overrides")


def check_preprocessing(model: dict, where: str) -> None:
    """A tower's image preprocessing keys (model.crop_pct, interpolation, mean, std; 0 / "" /
    [] = the preset's, timm's pretrained cfg), named with `where` (the model phase checks
    them again, through compiler.models.image.check_preprocess)."""
    if model.get("name") != "vit":
        return
    from compiler.models.image import check_preprocess
    try:
        check_preprocess(model.get("crop_pct", 0.0), model.get("interpolation", ""), model.get("mean", []),
                         model.get("std", []))
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None


def dump(cfg: dict) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)


CHECKED = REPO / "artifacts" / "config" / "checked"
# The stage harness: the code every phase stage runs around its phase (`python -m pipeline
# <phase>`: argument handling, params, artifacts, store, fan-out, monitors, the phase table).
# dvc.yaml lists these files as deps of `config` alone; its output carries their sha256 and
# every stage depends on it, so a change here reruns them all, as a dep of each would.
HARNESS = ("pipeline/__main__.py", "pipeline/stages.py", "pipeline/config.py", "pipeline/fanout.py",
           "pipeline/store.py", "pipeline/codec.py", "pipeline/codec_format.py", "pipeline/codec_read.py",
           "pipeline/monitor.py", "pipeline/progress.py",
           "pipeline/trim.py", "pipeline/__init__.py", "pipeline/numba_cache.py",
           "compiler/__init__.py", "compiler/phases.py", "compiler/target.py", "compiler/result.py",
           "compiler/policy.py", "compiler/mapper.py",
           # target.py's kernel costs (every phase from plan on prices or charges them)
           "compiler/costs/__init__.py", "compiler/costs/amp.py", "compiler/costs/vertices.py",
           "compiler/costs/vector.py", "compiler/costs/merge.py")


def checked_text(root: Path = REPO) -> bytes:
    """What `config` writes: the check passed, and the harness's bytes by sha256 (file by file)."""
    lines = [f"{hashlib.sha256((root / p).read_bytes()).hexdigest()}  {p}\n" for p in HARNESS]
    return ("params.yaml passed `python -m pipeline config`; every stage depends on this file, "
            "which changes only with the stage harness:\n" + "".join(lines)).encode()


def check_stage() -> int:
    """`python -m pipeline config`, the first DVC stage: every key and value of params.yaml is
    checked before DVC deletes any other stage's outputs. Its one output changes only with
    the stage harness (HARNESS), so a passing check reruns nothing downstream; on failure
    nothing is written."""
    try:
        load_params()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = checked_text()
    if not CHECKED.is_file() or CHECKED.read_bytes() != text:
        try:
            CHECKED.parent.mkdir(parents=True, exist_ok=True)
            tmp = CHECKED.with_name(".checked.tmp")
            tmp.write_bytes(text)
            tmp.replace(CHECKED)
        except OSError as e:
            print(f"error: cannot write {CHECKED.relative_to(REPO)}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 0


HELP = """Regenerate, compare or check the trial configuration.

  write [overrides]      params.yaml := conf/ composed with the Hydra overrides (what `dvc repro` reads;
                         after changing conf/ defaults, so the two agree)
  check                  exit 1 if params.yaml differs from the composition of conf/
  validate [overrides]   check every key and value, one line `error: ...` and exit 2 on the first bad one:
                         with overrides, conf/ composed with them (what `dvc exp run -S` would compose);
                         without, params.yaml as it is

examples:
  python -m pipeline.config write
  python -m pipeline.config validate model.layers=27 target=ipu21
  python -m pipeline.config validate model.layerz=3      # DVC's multi-line error, in one line"""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.config", description=HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", nargs="?", default="check", choices=["write", "check", "validate"])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides: key=value, group=option")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "validate":
            if args.overrides:
                check_overrides(args.overrides, multirun=True)   # a sweep: every point
            else:
                load_params()
            print("ok")
            return 0
        cfg = compose(args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.cmd == "write":
        PARAMS.write_text(dump(cfg))
        print(f"wrote {PARAMS.name}")
        return 0
    if yaml.safe_load(PARAMS.read_text()) != cfg:
        print(f"{PARAMS.name} differs from the composition of conf/: run `python -m pipeline.config write`",
              file=sys.stderr)
        return 1
    print(f"{PARAMS.name} equals the composition of conf/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`python -m pipeline.family`: the plan-family stage. With policy.pipeline_groups=auto it
prices the whole chip and every pipeline of G tile groups by plan and expand on the trial's
model, target and policy (compiler/family.py) and writes the pick with every candidate's
figures to artifacts/family/choice.json; otherwise it writes the set group count at once.
The plan stage depends on that file, not on the policy keys only expand reads, so changing
one of them reruns this stage (instant unless auto) but the plan stage only when the pick
changes."""
from __future__ import annotations

import json
import sys

from compiler import mapper as mappers
from compiler.family import price
from compiler.phases import chip_target, policy_of
from compiler.target import ConfigError

from .config import REPO, load_params
from .stages import StageError, load_result

OUT = REPO / "artifacts" / "family" / "choice.json"


def choice(cfg: dict) -> dict:
    p = policy_of(cfg)
    if p.pipeline_groups != "auto":
        return {"pipeline_groups": p.pipeline_groups}
    return price(load_result("model", lazy=True), chip_target(cfg), p, mappers.serial)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(f"usage: python -m pipeline.family   (the family stage of dvc.yaml; reads params.yaml)\n\n{__doc__}")
        return 0
    if argv:
        print(f"error: python -m pipeline.family takes no arguments (got {argv[0]!r}); it reads params.yaml",
              file=sys.stderr)
        return 2
    try:
        doc = choice(load_params(inputs=False))
    except (ConfigError, StageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m pipeline.family`: the plan-family stage. With policy.pipeline_groups=auto it
prices the whole chip and every pipeline of G tile groups by plan and expand on the trial's
model, target and policy (compiler/family.py) and writes the pick with every candidate's
figures to artifacts/family/choice.json; otherwise it writes the set group count at once.
The plan stage depends on that file, not on the policy keys only expand reads, so changing
one of them reruns this stage (instant unless auto) but the plan stage only when the pick
changes."""
from __future__ import annotations

import sys

from compiler import mapper as mappers
from compiler.family import price
from compiler.phases import chip_target, policy_of

from . import choice_stage
from .stages import StageError, load_result


def choice(cfg: dict) -> dict:
    p = policy_of(cfg)
    if p.pipeline_groups != "auto":
        return {"pipeline_groups": p.pipeline_groups}
    return price(load_result("model", lazy=True), chip_target(cfg), p, mappers.serial)


def main(argv: list[str] | None = None) -> int:
    return choice_stage.main("family", __doc__, choice, argv, errors=(StageError,))


if __name__ == "__main__":
    sys.exit(main())

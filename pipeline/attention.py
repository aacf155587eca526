"""`python -m pipeline.attention`: the attention stage. With model.attention=auto it prices
materialized and flash attention by plan and expand on the trial's target and policy
(compiler/attn_choice.py) and writes the pick with both figures to
artifacts/attention/choice.json; otherwise it writes the named variant at once. The model
stage depends on that file, not on the target and policy keys, so changing a policy key
reruns this stage (instant unless auto) but the model stage only when the pick changes."""
from __future__ import annotations

import sys

from compiler import mapper as mappers
from compiler.attn_choice import price
from compiler.phases import ModelResult, run_phase

from . import choice_stage


def choice(cfg: dict) -> dict:
    att = dict(cfg["model"]).get("attention")
    if att != "auto":
        return {"attention": att}
    from compiler import models
    return price(cfg, mappers.serial, lambda m: ModelResult(*models.build(m)), run_phase)


def main(argv: list[str] | None = None) -> int:
    return choice_stage.main("attention", __doc__, choice, argv)


if __name__ == "__main__":
    sys.exit(main())

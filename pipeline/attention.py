"""`python -m pipeline.attention`: the attention stage. With model.attention=auto it prices
materialized and flash attention by plan and expand on the trial's target and policy
(compiler/attn_choice.py) and writes the pick with both figures to
artifacts/attention/choice.json; otherwise it writes the named variant at once. The model
stage depends on that file, not on the target and policy keys, so changing a policy key
reruns this stage (instant unless auto) but the model stage only when the pick changes."""
from __future__ import annotations

import json
import sys

from compiler import mapper as mappers
from compiler.attn_choice import price
from compiler.phases import ModelResult, run_phase
from compiler.target import ConfigError

from .config import REPO, load_params

OUT = REPO / "artifacts" / "attention" / "choice.json"


def choice(cfg: dict) -> dict:
    att = dict(cfg["model"]).get("attention")
    if att != "auto":
        return {"attention": att}
    from compiler import models
    return price(cfg, mappers.serial, lambda m: ModelResult(*models.build(m)), run_phase)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(f"usage: python -m pipeline.attention   (the attention stage of dvc.yaml; reads params.yaml)\n\n{__doc__}")
        return 0
    if argv:
        print(f"error: python -m pipeline.attention takes no arguments (got {argv[0]!r}); it reads params.yaml",
              file=sys.stderr)
        return 2
    try:
        doc = choice(load_params(inputs=False))     # the model build reads (and checks) them
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The command line of the two pricing stages (pipeline/attention.py: model.attention=auto;
pipeline/family.py: policy.pipeline_groups=auto): no arguments (a DVC stage reads
params.yaml), --help prints the stage's docstring, a bad config is one line and exit 2, and
the choice is written whole or not at all to artifacts/<stage>/choice.json."""
from __future__ import annotations

import json
import sys

from compiler.target import ConfigError

from .config import REPO, load_params


def out_path(stage: str):
    return REPO / "artifacts" / stage / "choice.json"


def main(stage: str, doc: str, choice, argv: list[str] | None = None, errors: tuple = ()) -> int:
    """choice(cfg) -> the document to write; `errors`: exception types besides ConfigError
    that are a user's to fix (one line, exit 2)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(f"usage: python -m pipeline.{stage}   (the {stage} stage of dvc.yaml; reads params.yaml)\n\n{doc}")
        return 0
    if argv:
        print(f"error: python -m pipeline.{stage} takes no arguments (got {argv[0]!r}); it reads params.yaml",
              file=sys.stderr)
        return 2
    try:
        got = choice(load_params(inputs=False))
    except (ConfigError, *errors) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = out_path(stage)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)
    return 0

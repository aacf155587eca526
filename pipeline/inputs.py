"""`python -m pipeline.inputs`: the files the model stage reads (model.weights,
model.input: a path or a list of paths) linked under artifacts/inputs/<key>/<i>/, so
that DVC tracks them by content.

params.yaml holds only their paths: replacing a file at the same path changes no
param. This stage runs on every `dvc repro` (always_changed: cheap, a hard link, or a
copy where links are impossible) and its output directory is a dependency of the
model stage, hashed by content: a changed file reruns the model stage, an unchanged
one lets DVC skip it. An empty path links nothing (manifest.json still names it), nor does a
bundled photo (`photo:NAME`: scikit-image's, read from its installed package; the manifest
names it, so choosing another reruns the model stage)."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from compiler.models import photos
from compiler.target import ConfigError

from .config import load_params

OUT = Path("artifacts") / "inputs"
KEYS = ("weights", "input")


def link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def main() -> int:
    try:
        model = load_params()["model"]
        paths = {k: [str(p) for p in v] if isinstance(v := model.get(k) or "", list) else str(v) for k in KEYS}
        for k, ps in paths.items():
            for p in ps if isinstance(ps, list) else [ps]:
                if p and not photos.is_photo(p) and not Path(p).is_file():
                    raise ConfigError(f"model.{k}={p}: no such file")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    for k, ps in paths.items():
        for i, p in enumerate(ps if isinstance(ps, list) else [ps]):
            if p and not photos.is_photo(p):
                (OUT / k / str(i)).mkdir(parents=True)
                link(Path(p), OUT / k / str(i) / Path(p).name)
    (OUT / "manifest.json").write_text(json.dumps(paths, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

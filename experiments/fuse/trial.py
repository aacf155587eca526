"""One trial's per-op cycles (compiler/report/ops.py: matmul, vector, exchange, sync of one
layer) as experiments/fuse/ops/<label>.csv, and its headline in <label>.json.

    python experiments/fuse/trial.py LABEL [key=value ...]

e.g. `trial.py f16-27 model.layers=27`. Every phase in-process (serial mapper), the same
phases as `dvc repro` / `python -m pipeline.trial` (experiments/comm/ops_trial.py's runner,
writing here so that this study's files stay its own)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "comm"))
import ops_trial  # noqa: E402

if __name__ == "__main__":
    ops_trial.main(sys.argv[1:], Path(__file__).resolve().parent)

"""One full-size trial (every phase, the simulator included), its per-op cycles of one
layer and its headline into experiments/attention/ops/<label>.{csv,json}: the comm
study's ops_trial.py pointed at this folder.

    python experiments/attention/trial.py LABEL [key=value ...]"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent / "comm"))
import ops_trial  # noqa: E402

if __name__ == "__main__":
    ops_trial.main(sys.argv[1:], HERE)

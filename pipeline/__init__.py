"""Orchestration: DVC stage entry points, the task store, Dask fan-out, host monitor."""
from pathlib import Path

from .numba_cache import warm

# Every stage runs `python -m pipeline...`, which imports this first: in a queued experiment's
# checkout, take the workspace's compiled kernels before anything imports numba (numba_cache.py).
warm(Path(__file__).resolve().parent.parent)

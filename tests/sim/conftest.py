# Make `compiler` importable when pytest is run as a bare `pytest` (the repo is not installed).
import sys
from pathlib import Path

_root = str(Path(__file__).resolve().parents[2])
if _root not in sys.path:
    sys.path.insert(0, _root)

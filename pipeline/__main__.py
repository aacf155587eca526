"""`python -m pipeline <phase>`: run one stage of the trial (see pipeline/stages.py)."""
import sys

from .stages import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``python -m llm_scale ...``: see llm_scale.cli."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())

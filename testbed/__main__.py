"""``python -m testbed``: see testbed/cli.py."""

from __future__ import annotations

import sys

from testbed.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m skillflow.cli.main``: the ``skillflow`` command without the console script."""

import sys

from skillflow.cli.entry import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m skillflow.cli.main``: the ``skillflow`` command without the console script."""

from skillflow.cli import app

if __name__ == "__main__":
    app()

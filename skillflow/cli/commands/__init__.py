"""Command modules; each registers on :data:`skillflow.cli.app.app` when imported."""

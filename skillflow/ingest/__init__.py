"""Ingest of real agent trajectories (τ-bench, ToolBench, API-Bank) through the capture API."""

from skillflow.ingest.api_bank import ingest_api_bank, parse_api_bank
from skillflow.ingest.common import IngestReport, error_class_for, reward_evaluator
from skillflow.ingest.tau_bench import ingest_tau_bench, parse_tau_bench
from skillflow.ingest.toolbench import ingest_toolbench, parse_toolbench

__all__ = [
    "IngestReport",
    "error_class_for",
    "ingest_api_bank",
    "ingest_tau_bench",
    "ingest_toolbench",
    "parse_api_bank",
    "parse_tau_bench",
    "parse_toolbench",
    "reward_evaluator",
]

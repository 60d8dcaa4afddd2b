"""Ingest of real agent trajectories (τ-bench, ToolBench, API-Bank) through the capture API."""

from skillflow.lab.ingest.api_bank import ingest_api_bank, parse_api_bank
from skillflow.lab.ingest.common import IngestReport, error_class_for, reward_evaluator
from skillflow.lab.ingest.tau_bench import ingest_tau_bench, parse_tau_bench
from skillflow.lab.ingest.toolbench import ingest_toolbench, parse_toolbench

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

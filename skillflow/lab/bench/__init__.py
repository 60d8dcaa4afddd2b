"""Benchmarks behind ``skillflow bench``; figures and commands are recorded in docs/BENCHMARKS.md."""

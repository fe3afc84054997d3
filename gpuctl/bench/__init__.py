"""Smoke and acceptance benchmarks: suites, remote execution, pairing, judging (see run.py)."""

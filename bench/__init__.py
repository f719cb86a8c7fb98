"""Benchmarks of walstream (run as ``python -m bench.<name>`` from the repo root)."""

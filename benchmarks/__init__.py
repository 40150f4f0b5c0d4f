"""Throughput benchmarks for strom (``python -m benchmarks.run``); results go to BENCHMARKS.md."""
